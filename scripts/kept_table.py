"""Render one of a config's tables from kept points (``scripts/keep_point.py``) instead of a live ``results/``
folder: after a machine is replaced, its weights are gone but the kept records are in git, and a table over them
is computed by the same code as the pipeline's (``mars.report.tables.make_table``, the job of
``mars.pipeline.jobs.table_job``).

    python scripts/kept_table.py --configfile configs/smollm2-135m.yaml configs/smollm2-curve.yaml \\
        --kept docs/smollm2_curve_points --name curve --output results/smollm2-curve/kept/curve.csv

The config files are merged as Snakemake merges its ``--configfile`` list (later files update earlier ones). Every
model the table reads must have a kept point: its ``metrics.json``, ``run_config.json`` and each evaluation record
the table's rows name; a missing one is one error line and nothing is written. Writes the CSV with its ``.md`` and
``.tex`` twins, as the pipeline's table rules do.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import yaml
from snakemake.utils import update_config

from mars.pipeline.config import ConfigError, validate
from mars.pipeline.experiments import table_models, table_settings
from mars.pipeline.jobs import table_job
from mars.report.tables import make_table

TRAINING_FILES = ("metrics.json", "run_config.json")


def merged_config(paths: list[str]) -> dict:
    """The config Snakemake would run with ``--configfile PATHS...``, validated (the schema's defaults filled in)."""
    config: dict = {}
    for path in paths:
        try:
            update_config(config, yaml.safe_load(Path(path).read_text()) or {})
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"config file {path} is unreadable: {exc}".splitlines()[0]) from None
    return validate(config)


def results_tree(config: dict, name: str, kept: Path, tree: Path) -> list[str]:
    """Lay the kept records a table reads out under ``tree`` as a results folder (``models/<m>/``,
    ``<kind>/<m>/<setting>/<family>.json``, the pipeline's layout); returns the evaluation files, as the table
    rule's inputs."""
    for model in table_models(config, name):
        for filename in TRAINING_FILES:
            source = kept / model / filename
            if not source.is_file():
                raise ConfigError(f"no kept {filename} of {model} in {kept / model}")
            target = tree / "models" / model / filename
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    inputs = []
    for setting in table_settings(config, name):
        for path in map(Path, setting.files(tree)):
            relative = path.relative_to(tree)  # <kind>/<model>/<setting>/<family>.json
            kind, model, rest = relative.parts[0], relative.parts[1], Path(*relative.parts[2:])
            source = kept / model / kind / rest
            if not source.is_file():
                raise ConfigError(f"no kept record {source}")
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, path)
            inputs.append(str(path))
    return inputs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", nargs="+", required=True, help="config files, merged in order")
    parser.add_argument("--kept", required=True, type=Path, help="folder of kept points (scripts/keep_point.py)")
    parser.add_argument("--name", required=True, help="the table (as mars report table --name)")
    parser.add_argument("--output", required=True, type=Path, help="the table's CSV")
    args = parser.parse_args(argv)
    try:
        config = merged_config(args.configfile)
        with tempfile.TemporaryDirectory() as tmp:
            inputs = results_tree(config, args.name, args.kept, Path(tmp))
            args.output.parent.mkdir(parents=True, exist_ok=True)
            frame = make_table(table_job(config, args.name), tmp, args.output, inputs=inputs)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(frame.round(2).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
