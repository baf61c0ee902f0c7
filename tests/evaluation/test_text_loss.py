"""mars.evaluation.text_loss: the stdlib sample, the loss against HF's own loss, and the paired difference by hand."""

import math
import subprocess
import sys

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from mars.evaluation import text_loss as T
from mars.pipeline.config import ConfigError


def fake_stdlib(root, n=12):
    for i in range(n):
        (root / f"mod{i:02d}.py").write_text(f"def f{i}(x):\n    return x + {i}\n" + "# padding line\n" * 80)
    (root / "tiny.py").write_text("x = 1\n")  # under 1 kB: never sampled
    for part in ("test", "site-packages"):
        (root / part).mkdir()
        (root / part / "big.py").write_text("y = 2\n" * 400)
    return root


def test_the_sample_is_even_strides_over_sorted_source_files_without_tests_or_packages(tmp_path):
    root = fake_stdlib(tmp_path)
    sample = T.stdlib_sample(4, root)
    assert [p.name for p in sample] == ["mod00.py", "mod03.py", "mod06.py", "mod09.py"]
    assert T.stdlib_sample(4, root) == sample
    with pytest.raises(ConfigError, match="has 12 source files; 13 were asked for"):
        T.stdlib_sample(13, root)


def test_the_real_stdlib_sample_has_distinct_library_files():
    sample = T.stdlib_sample(64)
    assert len(set(sample)) == 64
    assert not any("test" in p.relative_to(T.stdlib_root()).parts[:-1] for p in sample)


def test_the_loss_is_hf_own_mean_token_loss_pooled_over_files(small_init, tmp_path):
    (root := tmp_path / "lib").mkdir()
    fake_stdlib(root)
    record = T.text_loss(small_init / "init", n_files=3, max_tokens=40, root=root)
    model = AutoModelForCausalLM.from_pretrained(small_init / "init")
    tokenizer = AutoTokenizer.from_pretrained(small_init / "init")
    total = tokens = 0.0
    for path in T.stdlib_sample(3, root):
        ids = torch.tensor([tokenizer(path.read_text(), add_special_tokens=False)["input_ids"][:40]])
        with torch.no_grad():
            loss = model(input_ids=ids, labels=ids).loss  # HF shifts and averages over the predicted tokens
        total += float(loss) * (ids.shape[1] - 1)
        tokens += ids.shape[1] - 1
    assert record["tokens"] == tokens == 3 * 39
    assert record["loss"] == pytest.approx(total / tokens, rel=1e-5)
    assert [f["file"] for f in record["per_file"]] == ["mod00.py", "mod04.py", "mod08.py"]


def test_paired_difference_by_hand():
    def record(losses, tokens):
        files = [
            {"file": f"f{i}", "sha256": str(i), "tokens": t, "loss_sum": x * t}
            for i, (x, t) in enumerate(zip(losses, tokens))
        ]
        return {"per_file": files, "max_tokens": 8}

    ours, ref = record([2.0, 3.0, 1.0], [10, 30, 60]), record([1.5, 2.0, 1.5], [10, 30, 60])
    diff, se = T.paired_difference(ours, ref)
    # per-file differences 0.5, 1.0, -0.5 weighted 0.1, 0.3, 0.6: mean 0.05; SE = sqrt(3/2 * sum w^2 (d - mean)^2)
    assert diff == pytest.approx(0.05)
    assert se == pytest.approx(math.sqrt(1.5 * (0.01 * 0.45**2 + 0.09 * 0.95**2 + 0.36 * 0.55**2)))
    other = record([2.0, 3.0, 1.0], [10, 30, 60])
    other["per_file"][0]["sha256"] = "changed"
    with pytest.raises(ConfigError, match="different texts"):
        T.paired_difference(other, ref)


def test_the_command_refuses_a_missing_model_in_one_line(tmp_path):
    out = tmp_path / "loss.json"
    proc = subprocess.run(
        [sys.executable, "-m", "mars.cli", "text-loss", "--model", str(tmp_path / "nope"), "--output", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"error: --model {tmp_path / 'nope'}: no such checkpoint folder"]
    assert not out.exists()
