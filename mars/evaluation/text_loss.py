"""Next-token loss on real text that nobody here wrote and no run trains on: CPython's standard-library source.

    mars text-loss --model CKPT --output text_loss.json [--files 64] [--max-tokens 512]

The general capability a fine-tune must not erode, measured the same way for every model: a fixed sample of the
interpreter's own ``.py`` files (the ``stdlib`` folder of :mod:`sysconfig`; tests, ``site-packages`` and vendored
code left out), chosen by sorted path at even strides so that every machine with the same Python picks the same
files, each read from its start and cut to ``max_tokens`` tokens. The loss is the mean negative log-likelihood per
predicted token (natural log) of the model as a plain causal LM, one file per forward, no chat template.

The record keeps, per file, its path relative to the stdlib folder, its sha256, the number of predicted tokens
and the summed loss, so that two models' losses can be compared file by file (a paired difference with a standard
error over files: :func:`paired_difference`) and a comparison of records over different texts is refused.
"""

from __future__ import annotations

import hashlib
import math
import os
import platform
import sysconfig
from pathlib import Path

from mars.pipeline.config import ConfigError

# folders of the stdlib that are not the library's own source
EXCLUDED_PARTS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__", "_vendor"}


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_sample(n_files: int, root: str | Path | None = None) -> list[Path]:
    """``n_files`` source files of the standard library at even strides over the sorted relative paths (files
    under 1 kB, mostly ``__init__`` stubs, left out)."""
    root = Path(root) if root else stdlib_root()
    candidates = sorted(
        p.relative_to(root)
        for p in root.rglob("*.py")
        if not EXCLUDED_PARTS & set(p.relative_to(root).parts[:-1]) and p.stat().st_size >= 1024
    )
    if len(candidates) < n_files:
        raise ConfigError(
            f"the standard library at {root} has {len(candidates)} source files; {n_files} were asked for"
        )
    stride = len(candidates) / n_files
    return [root / candidates[int(i * stride)] for i in range(n_files)]


def text_loss(
    model: str | os.PathLike,
    n_files: int = 64,
    max_tokens: int = 512,
    dtype: str | None = None,
    root: str | Path | None = None,
) -> dict:
    """The record of one model's loss on the stdlib sample (module docstring); ``root``: another folder of source
    files instead of the standard library."""
    import torch

    from mars.decoding.generation import load_model

    if n_files < 1 or max_tokens < 2:
        raise ConfigError(f"--files must be >= 1 and --max-tokens >= 2; got {n_files} and {max_tokens}")
    root = Path(root) if root else stdlib_root()
    files = stdlib_sample(n_files, root)
    net, tokenizer = load_model(model, dtype=dtype or "float32", device="cpu")
    net.eval()
    per_file = []
    with torch.inference_mode():
        for path in files:
            raw = path.read_bytes()
            ids = tokenizer(raw.decode("utf-8", errors="replace"), add_special_tokens=False)["input_ids"][:max_tokens]
            inputs = torch.tensor([ids])
            logits = net(input_ids=inputs).logits.float()
            nll = torch.nn.functional.cross_entropy(logits[0, :-1], inputs[0, 1:], reduction="sum")
            per_file.append(
                {
                    "file": str(path.relative_to(root)),
                    "sha256": hashlib.sha256(raw).hexdigest(),
                    "tokens": len(ids) - 1,
                    "loss_sum": float(nll),
                }
            )
    tokens = sum(f["tokens"] for f in per_file)
    return {
        "model": str(model),
        "text": "cpython-stdlib",
        "python": platform.python_version(),
        "files": n_files,
        "max_tokens": max_tokens,
        "tokens": tokens,
        "loss": sum(f["loss_sum"] for f in per_file) / tokens,
        "per_file": per_file,
    }


def paired_difference(record: dict, reference: dict) -> tuple[float, float]:
    """(loss of ``record`` - loss of ``reference``, its standard error over files): the per-file mean losses'
    differences, weighted by each file's tokens as the pooled loss is. The two must be over the same texts."""
    ours = {(f["file"], f["sha256"]): f for f in record["per_file"]}
    theirs = {(f["file"], f["sha256"]): f for f in reference["per_file"]}
    if set(ours) != set(theirs) or record["max_tokens"] != reference["max_tokens"]:
        raise ConfigError("text-loss records over different texts cannot be compared (another Python or sample?)")
    weights, diffs = [], []
    for key, f in ours.items():
        weights.append(f["tokens"])
        diffs.append(f["loss_sum"] / f["tokens"] - theirs[key]["loss_sum"] / theirs[key]["tokens"])
    total = sum(weights)
    mean = sum(w * d for w, d in zip(weights, diffs)) / total
    n = len(diffs)
    if n < 2:
        return mean, math.nan
    # the weighted mean's standard error (ratio estimator over files)
    var = n / (n - 1) * sum((w / total) ** 2 * (d - mean) ** 2 for w, d in zip(weights, diffs))
    return mean, math.sqrt(var)


def add_parser(commands) -> None:
    """``mars text-loss`` (registered by mars.cli)."""
    parser = commands.add_parser(
        "text-loss", help="next-token loss on a fixed sample of CPython's standard-library source (real text)"
    )
    parser.add_argument("--model", required=True, help="checkpoint folder")
    parser.add_argument("--output", required=True, help="JSON record to write")
    parser.add_argument("--files", type=int, default=64, help="source files in the sample")
    parser.add_argument("--max-tokens", type=int, default=512, help="tokens read from the start of each file")
    parser.add_argument("--dtype", help="float32 (default) | bfloat16 | float16")
    parser.set_defaults(run=_run)


def _run(args) -> None:
    import sys

    from mars.checkpoints import check_checkpoint
    from mars.fileio import write_json_atomic

    model = check_checkpoint(args.model, "--model")
    record = text_loss(model, args.files, args.max_tokens, args.dtype)
    write_json_atomic(args.output, record)
    print(
        f"mars text-loss: {record['loss']:.4f} nats/token over {record['tokens']} tokens -> {args.output}",
        file=sys.stderr,
    )
