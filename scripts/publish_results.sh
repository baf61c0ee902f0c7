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
[ -f "$config" ] || { echo "error: no config file $config" >&2; exit 1; }
read -r tables figures < <(.venv/bin/python -c '
import sys, yaml
config = yaml.safe_load(open(sys.argv[1]))  # the same defaults as workflow/rules/common.smk
report = config["report"]
print(report.get("tables_dir") or config["results_dir"] + "/tables", report["figures_dir"])' "$config")
[ -n "${figures:-}" ] || { echo "error: cannot read report.tables_dir / figures_dir from $config" >&2; exit 1; }
for f in "$tables"/*.csv "$figures"/*.png; do
  [ -e "$f" ] || { echo "error: no finished run in $tables and $figures (nothing copied)" >&2; exit 1; }
done
mkdir -p "$dest/tables" "$dest/figures"
cp "$tables"/*.csv "$tables"/*.md "$dest/tables/"
cp "$figures"/*.png "$figures"/*.pdf "$dest/figures/"
echo "copied $(ls "$dest/tables" | wc -l) table files and $(ls "$dest/figures" | wc -l) figure files to $dest"
