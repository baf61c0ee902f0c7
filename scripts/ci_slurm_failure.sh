#!/usr/bin/env bash
# CI, after a finished run through SLURM in DIR (cluster running) of the experiment NAME with the given config
# arguments: a rule that fails inside SLURM makes the workflow fail with the rule named, and the resubmission after
# the fix reuses every finished output. TABLE is a table of that run, VICTIM (relative to results/NAME) an
# evaluation that, of that run's tables, only TABLE reads.
#   scripts/ci_slurm_failure.sh DIR NAME TABLE VICTIM --configfile CONFIG [CONFIG...]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=$1
NAME=$2
TABLE=$3
VICTIM=$4
shift 4
SNAKEMAKE="$ROOT/.venv/bin/snakemake --snakefile $ROOT/Snakefile $* --directory $DIR
  --cores all --profile $ROOT/slurm --slurm-status-command squeue --slurm-init-seconds-before-status-checks 1"
victim=$DIR/results/$NAME/$VICTIM
target=results/$NAME/tables/$TABLE.csv
table=$DIR/$target
cp -p "$victim" "$DIR/victim.bak"
echo "not json" > "$victim"          # break the table's input, then ask for the table again
rm -f "$table"
touch -r "$DIR/victim.bak" "$victim"  # same mtime: only the missing table is out of date
if (cd "$DIR" && timeout --signal=INT --kill-after=60 600 $SNAKEMAKE "$target") > "$DIR/fail.log" 2>&1; then
  echo "the broken table rule did not fail the workflow"; exit 1
fi
grep -q "Error in rule table" "$DIR/fail.log" || { tail -40 "$DIR/fail.log"; echo "failure not reported with the rule named"; exit 1; }
grep -qE "slurm_logs|SLURM" "$DIR/fail.log" || { echo "the failed job was not a SLURM job"; exit 1; }
echo "a failing rule inside SLURM fails the workflow, rule named: ok"
cp -p "$DIR/victim.bak" "$victim"    # the fix
(cd "$DIR" && timeout --signal=INT --kill-after=60 600 $SNAKEMAKE "$target") > "$DIR/fixed.log" 2>&1 \
  || { tail -40 "$DIR/fixed.log"; echo "resubmission failed"; exit 1; }
ran=$(grep -cE "^(local)?rule " "$DIR/fixed.log" || true)
grep -qE "^rule table:" "$DIR/fixed.log" || { echo "the table was not rebuilt"; exit 1; }
others=$(grep -E "^(local)?rule " "$DIR/fixed.log" | grep -vE "^rule table:|^localrule all:" || true)
[ -z "$others" ] || { echo "the resubmission reran finished jobs: $others"; exit 1; }
echo "resubmission after the fix reran only the failed job ($ran jobs incl. the target): ok"
