"""The ``mars`` command line: ``mars world | train | generate | bench | eval``.

Bad input (config, flags, checkpoints, data) prints one ``error:`` line and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from mars.config import ConfigError


def _world(args) -> None:
    from mars.config import load_config
    from mars.world.build import build_world

    config = load_config(args.config)
    summary = build_world(config["world"], args.output)
    print(json.dumps(summary, indent=2))


def _tags(pairs: list[str]) -> dict:
    bad = [p for p in pairs if "=" not in p]
    if bad:
        raise ConfigError(f"--tag needs KEY=VALUE, got {bad[0]!r}")
    return dict(p.split("=", 1) for p in pairs)


def _train(args) -> None:
    from mars.config import load_config, train_spec
    from mars.train import train

    config = load_config(args.config)
    spec = train_spec(config, args.model)
    metrics = train(spec, init=args.init, data_dir=args.data, output=args.output, experiment=config["name"],
                    run_name=args.model, results_dir=config.get("results_dir", "results"),
                    mask_token=config["world"].get("mask_token"),
                    tags={"model": args.model, **_tags(args.tag)})
    print(json.dumps(metrics, indent=2, default=str))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mars", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    world = commands.add_parser("world", help="build the tiny offline world (data, tokenizer, initial model)")
    world.add_argument("--config", required=True)
    world.add_argument("--output", required=True, help="folder to create")
    world.set_defaults(run=_world)

    train = commands.add_parser("train", help="train one model entry of the config")
    train.add_argument("--config", required=True)
    train.add_argument("--model", required=True, help="name of the entry under 'models'")
    train.add_argument("--init", required=True, help="starting checkpoint folder (or hub id)")
    train.add_argument("--data", required=True, help="folder with train.jsonl")
    train.add_argument("--output", required=True, help="checkpoint folder to create")
    train.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="extra MLflow tag")
    train.set_defaults(run=_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.run(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
