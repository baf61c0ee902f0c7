#!/usr/bin/env bash
# Copy a finished tiny run's tables and figures into docs/tiny_run/, the copies the README shows and git keeps.
# (The pipeline's own outputs, results/tables/ and paper_figures/, stay untracked: committed outputs would make a
# fresh clone's `snakemake --cores all` think there is nothing to do.)
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p docs/tiny_run/tables docs/tiny_run/figures
cp results/tables/*.csv results/tables/*.md docs/tiny_run/tables/
cp paper_figures/*.png paper_figures/*.pdf docs/tiny_run/figures/
echo "copied $(ls docs/tiny_run/tables | wc -l) table files and $(ls docs/tiny_run/figures | wc -l) figure files"
