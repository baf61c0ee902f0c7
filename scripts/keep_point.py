"""Keep one finished model's measurements in git while its run goes on: its training records and its evaluation
records, the samples slimmed to what the tables compute from (per-question scores and tokens per forward, for the
paired standard errors), so that a lost ``results/`` folder loses only the runs in flight.

    python scripts/keep_point.py --results results/smollm2-curve --model mars_x1 --dest docs/smollm2_curve_points

writes ``<dest>/<model>/`` with ``metrics.json`` and ``run_config.json`` (from ``models/<model>/``), ``weights.json``
(the sha256 of each of its ``*.safetensors`` files: a later machine's retraining is compared on the weights
themselves, not only on the logs, while the weights stay out of git) and every
``eval/<model>/<setting>/<task>.json`` and ``sweep/<model>/<setting>/<task>.json``, each sample without its prompt,
generation, tokens and chunks. Only a finished model is kept: its folder must hold ``metrics.json`` and every
record must be a finished ``mars eval`` record; anything else is one error line and nothing is written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path

# what a kept sample holds: enough to recompute a family's score, its paired differences and tokens per forward
SAMPLE_FIELDS = ("task", "doc_id", "filter", "metrics", "generated_tokens", "forwards", "tokens_per_forward")
TRAINING_FILES = ("metrics.json", "run_config.json")


def weights_digest(model_dir: Path) -> dict[str, str]:
    """The sha256 of each ``*.safetensors`` file in ``model_dir``, by file name."""
    digests = {}
    for path in sorted(model_dir.glob("*.safetensors")):
        with path.open("rb") as f:
            digests[path.name] = hashlib.file_digest(f, "sha256").hexdigest()
    return digests


def slim_record(record: dict) -> dict:
    """An evaluation record with each sample cut to those of :data:`SAMPLE_FIELDS` it has (none added: a missing
    ``filter`` reads as "none", a None one would not); everything else kept as it is."""
    if record.get("kind") != "mars_eval" or "samples" not in record:
        raise ValueError("not a mars eval record")
    return {**record, "samples": [{k: s[k] for k in SAMPLE_FIELDS if k in s} for s in record["samples"]]}


def keep(results: Path, model: str, dest: Path) -> list[Path]:
    """Write ``model``'s kept records under ``dest/model`` (replacing an earlier copy); returns the files written."""
    trained = results / "models" / model
    if not (trained / "metrics.json").is_file():
        raise ValueError(f"{trained} is not a finished model (no metrics.json)")
    records = sorted(p for kind in ("eval", "sweep") for p in (results / kind / model).glob("*/*.json"))
    if not records:
        raise ValueError(f"{model} has no evaluation records under {results}/eval or {results}/sweep")
    with tempfile.TemporaryDirectory(dir=dest.parent if dest.parent.exists() else None) as tmp:
        staged = Path(tmp) / model
        for name in TRAINING_FILES:
            if (trained / name).is_file():
                staged.mkdir(parents=True, exist_ok=True)
                shutil.copy2(trained / name, staged / name)
        if digests := weights_digest(trained):
            (staged / "weights.json").write_text(json.dumps({"sha256": digests}, indent=1) + "\n")
        for path in records:
            try:
                slim = slim_record(json.loads(path.read_text()))
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{path}: {exc}") from None
            kind, _, setting, task = path.relative_to(results).parts  # eval|sweep / model / setting / task.json
            target = staged / kind / setting / task
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(slim, indent=1) + "\n")
        final = dest / model
        dest.mkdir(parents=True, exist_ok=True)
        if final.exists():
            shutil.rmtree(final)
        shutil.move(str(staged), final)
    return sorted(p for p in final.rglob("*") if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, required=True, help="the run's results folder (results/<name>)")
    parser.add_argument("--model", required=True, help="the model entry whose measurements to keep")
    parser.add_argument("--dest", type=Path, required=True, help="the folder in docs/ that keeps them")
    args = parser.parse_args(argv)
    try:
        written = keep(args.results, args.model, args.dest)
    except (OSError, ValueError) as exc:
        print(f"keep_point: {exc}", file=sys.stderr)
        return 2
    size = sum(p.stat().st_size for p in written)
    print(f"kept {len(written)} files ({size / 1024:.0f} KiB) in {args.dest / args.model}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
