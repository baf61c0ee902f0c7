#!/usr/bin/env bash
# Copy a finished run's tables and figures into docs/, the copies the README shows and git keeps.
#   scripts/publish_results.sh                                  # the tiny default run -> docs/tiny_run/
#   scripts/publish_results.sh configs/smollm2-135m.yaml docs/smollm2_run
# The source folders are the config's report.tables_dir and report.figures_dir. (The pipeline's own outputs stay
# untracked: committed outputs would make a fresh clone's `snakemake` think there is nothing to do.)
set -euo pipefail
cd "$(dirname "$0")/.."
config="${1:-config.yaml}"
dest="${2:-docs/tiny_run}"
paths="$(.venv/bin/python -c '
import sys
from mars.pipeline.config import ConfigError, load_config
try:
    config = load_config(sys.argv[1])  # validated, with the schema defaults the workflow gets
except ConfigError as exc:
    sys.exit(f"error: {exc}")
report = config["report"]  # the tables folder as workflow/rules/common.smk sets TABLES
print(report["tables_dir"] or config["results_dir"] + "/tables", report["figures_dir"])' "$config")"
read -r tables figures <<< "$paths"
# only a finished run is published: Snakemake must have nothing left to do for the config's default target
if ! .venv/bin/snakemake -n --nolock --quiet rules --configfile "$config" 2>&1 | grep -q "Nothing to be done"; then
  echo "error: the run of $config has not finished (snakemake -n has jobs left); nothing copied" >&2
  exit 1
fi
mkdir -p "$dest/tables" "$dest/figures"
cp "$tables"/*.csv "$tables"/*.md "$dest/tables/"
cp "$figures"/*.png "$figures"/*.pdf "$dest/figures/"
echo "copied $(ls "$dest/tables" | wc -l) table files and $(ls "$dest/figures" | wc -l) figure files to $dest"
