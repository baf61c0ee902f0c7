#!/usr/bin/env bash
# CI: the offline rehearsal of both paper configs (scripts/rehearsal.sh: configs/paper-*.yaml on `mars mirror`'s
# local stand-ins, sizes of configs/rehearsal.yaml), locally, and of the 0.5B config through a real single-node
# SLURM cluster (sbatch, srun, the Snakemake SLURM executor plugin), checked against the local run: every job must
# have been a SLURM job and the tables must be the same (wall-clock columns aside); then a failing rule inside SLURM
# and its resubmission. (The tiny world's smoke pipeline runs in the test suite, tests/test_pipeline_smoke.py.)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOCAL=$(mktemp -d /tmp/mars-ci-local.XXXX)
LOCAL7=$(mktemp -d /tmp/mars-ci-local7b.XXXX)
SLURM=$(mktemp -d /tmp/mars-ci-slurm.XXXX)
NAME=paper-0.5b-mirror

echo "== rehearsal of configs/paper-0.5b.yaml, local"
MARS_REHEARSAL_OUT=$LOCAL timeout --signal=INT --kill-after=60 1200 bash scripts/rehearsal.sh 0.5b
# The 7B config differs from the 0.5B one in its model shapes, FSDP launch and Table 6 (speculative decoding with a
# smaller hub draft): its rehearsal builds Table 2 and Table 6 only; every other table and figure is the 0.5B's code.
echo "== rehearsal of configs/paper-7b.yaml (Tables 2 and 6), local"
MARS_REHEARSAL_TABLES=table2,table6 MARS_REHEARSAL_OUT=$LOCAL7 timeout --signal=INT --kill-after=60 1200 \
  bash scripts/rehearsal.sh 7b

echo "== rehearsal of configs/paper-0.5b.yaml through SLURM"
bash scripts/slurm_cluster.sh start
trap 'bash scripts/slurm_cluster.sh stop' EXIT
cp -r "$LOCAL/mirror" "$SLURM/mirror"  # the same stand-ins (a mirror is rebuilt only where it is missing)
sed -i "s#$LOCAL/mirror#$SLURM/mirror#g" "$SLURM/mirror/"*.yaml
MARS_REHEARSAL_OUT=$SLURM timeout --signal=INT --kill-after=60 1800 bash scripts/rehearsal.sh 0.5b --slurm

jobs=$(grep -c "^\[.*\]$\|^rule \|^localrule " "$SLURM/run.log" || true)
submitted=$(grep -cE "submitted with SLURM jobid|SLURM jobid [0-9]+" "$SLURM/run.log" || true)
planned=$(grep -E "^total +[0-9]+" "$SLURM/run.log" | head -1 | awk '{print $2}')
echo "SLURM jobs submitted: $submitted of $planned planned jobs (the target rule 'all' runs locally)"
[ "$submitted" -ge $((planned - 1)) ] || { echo "not every job ran as a SLURM job"; exit 1; }

echo "== a failing rule inside SLURM, then the resubmission"
bash scripts/ci_slurm_failure.sh "$SLURM" "$NAME" --configfile "$ROOT/configs/paper-0.5b.yaml" \
  "$SLURM/mirror/$NAME.yaml" "$ROOT/configs/rehearsal.yaml"

echo "== tables: local vs SLURM"
.venv/bin/python scripts/compare_tables.py "$LOCAL/results/$NAME/tables" "$SLURM/results/$NAME/tables"
