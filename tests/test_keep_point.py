"""scripts/keep_point.py: a finished model's records kept in git, samples slimmed; an unfinished one refused."""

import hashlib
import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "keep_point.py"
spec = importlib.util.spec_from_file_location("keep_point", SCRIPT)
keep_point = importlib.util.module_from_spec(spec)
spec.loader.exec_module(keep_point)


def _results(root: Path, finished: bool = True) -> Path:
    model = root / "models" / "m"
    model.mkdir(parents=True)
    if finished:
        (model / "metrics.json").write_text(json.dumps({"optimizer_steps": 200}))
    (model / "run_config.json").write_text(json.dumps({"machine": {"cpu_model": "x"}}))
    (model / "model.safetensors").write_bytes(b"weights stay out")
    sample = {"task": "t", "doc_id": 3, "filter": "none", "metrics": {"exact_match": 1.0}, "generated_tokens": 5}
    sample.update(forwards=4, tokens_per_forward=1.25, prompt="long prompt", generation="answer", token_ids=[1, 2])
    for kind, setting in (("eval", "mars-tau1-probability"), ("sweep", "mars_lossless-tau0.95-probability")):
        folder = root / kind / "m" / setting
        folder.mkdir(parents=True)
        record = {"kind": "mars_eval", "task": "t", "metrics": {"exact_match": {"value": 1.0}}, "samples": [sample]}
        (folder / "gsm8k.json").write_text(json.dumps(record))
    return root


def test_a_finished_models_records_are_kept_slim(tmp_path):
    results = _results(tmp_path / "results")
    written = keep_point.keep(results, "m", tmp_path / "docs" / "points")
    names = {p.relative_to(tmp_path / "docs" / "points" / "m").as_posix() for p in written}
    assert names == {
        "metrics.json",
        "run_config.json",
        "weights.json",
        "eval/mars-tau1-probability/gsm8k.json",
        "sweep/mars_lossless-tau0.95-probability/gsm8k.json",
    }
    # the weights stay out; their digest, computed here independently, is kept
    digest = json.loads((tmp_path / "docs/points/m/weights.json").read_text())
    assert digest == {"sha256": {"model.safetensors": hashlib.sha256(b"weights stay out").hexdigest()}}
    kept = json.loads((tmp_path / "docs/points/m/eval/mars-tau1-probability/gsm8k.json").read_text())
    assert kept["metrics"] == {"exact_match": {"value": 1.0}}
    assert kept["samples"] == [
        {"task": "t", "doc_id": 3, "filter": "none", "metrics": {"exact_match": 1.0}, "generated_tokens": 5,
         "forwards": 4, "tokens_per_forward": 1.25}
    ]  # fmt: skip


def test_an_unfinished_model_is_refused_and_nothing_written(tmp_path):
    results = _results(tmp_path / "results", finished=False)
    assert keep_point.main(["--results", str(results), "--model", "m", "--dest", str(tmp_path / "kept")]) == 2
    assert not (tmp_path / "kept").exists()
    with pytest.raises(ValueError, match="not a mars eval record"):
        keep_point.slim_record({"kind": "other"})
