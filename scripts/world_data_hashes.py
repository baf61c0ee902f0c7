"""sha256 of the tiny world's data files (train / test / pretrain jsonl) for the ``world`` section of configs.

The data half of ``mars world`` (mars.world.build.build_world) without the tokenizer and the model, so it runs in
seconds with the standard library plus PyYAML.  Used to check that a refactoring of the task generators leaves the
generated data byte-identical:

    python scripts/world_data_hashes.py config.yaml configs/smoke.yaml
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path

import yaml

from mars.training.data import write_jsonl
from mars.world.tasks import make_pretrain, make_splits


def world_data_files(world: dict, out: Path) -> list[Path]:
    """Write the data files exactly as build_world does and return their paths."""
    seed = world.get("seed", 0)
    train, test = make_splits(world.get("train_per_family", 400), world.get("test_per_family", 100), seed=seed)
    pretrain = make_pretrain(world["pretrain_per_family"], seed=seed) if world.get("pretrain_per_family") else []
    for record in train + test + pretrain:
        record["target"] = json.dumps(record["target"], sort_keys=True)
    paths = [out / "train.jsonl", out / "test.jsonl"]
    write_jsonl(paths[0], train)
    write_jsonl(paths[1], test)
    if pretrain:
        paths.append(out / "pretrain.jsonl")
        write_jsonl(paths[2], pretrain)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", type=Path, help="config files with a `world` section")
    args = parser.parse_args(argv)
    for config in args.configs:
        world = yaml.safe_load(config.read_text())["world"]
        with tempfile.TemporaryDirectory() as tmp:
            for path in world_data_files(world, Path(tmp)):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                lines = sum(1 for _ in path.open())
                print(f"{config}  {path.name:15s} {lines:6d} records  sha256 {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
