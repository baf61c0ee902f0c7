"""scripts/gpu_check.sh --small: the GPU check's CPU mode runs and measures what it claims."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from mars.bench import gpu_check

ROOT = Path(__file__).resolve().parents[1]


def test_shapes_are_qwen25():
    """The published Qwen2.5-0.5B/7B shapes give their known parameter counts (0.49B tied, 7.62B untied)."""
    counts = {}
    for shape in ("qwen2.5-0.5b", "qwen2.5-7b"):
        with torch.device("meta"):
            model = Qwen2ForCausalLM(Qwen2Config(**gpu_check.SHAPES[shape]))
        counts[shape] = sum(p.numel() for p in model.parameters())
    assert round(counts["qwen2.5-0.5b"] / 1e9, 2) == 0.49
    assert round(counts["qwen2.5-7b"] / 1e9, 2) == 7.62


def test_small_run_on_cpu(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--small", str(tmp_path)],
        check=True,
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    entry = report["shapes"]["small"]
    assert entry["train_ar"]["s_per_step"] > 0 and entry["train_mars"]["s_per_step"] > 0
    # the MARS loss is L_mask + L_AR, both near ln(vocab) for random weights: about twice the AR loss
    assert entry["train_mars"]["loss"] == pytest.approx(2 * entry["train_ar"]["loss"], rel=0.1)
    assert sorted(entry["window"]) == ["1", "4"]
    for cost in entry["window"].values():
        # the window forward's first position is the 1-token forward's computation
        assert cost["first_token_max_abs_diff"] < 1e-4
        assert cost["ratio_tw_t1"] == pytest.approx(cost["tw_s"] / cost["t1_s"])


def test_unknown_shape_is_one_error_line(capsys):
    assert gpu_check.main(["--shapes", "qwen3"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: unknown shape 'qwen3'")
