#!/usr/bin/env bash
# CI: the offline rehearsal of both paper configs (scripts/rehearsal.sh: configs/paper-*.yaml on `mars mirror`'s
# local stand-ins, sizes of configs/rehearsal.yaml), locally, and of part of the 0.5B config (Table 9: two
# multi-process trainings and their evaluations) through a real single-node SLURM cluster (sbatch, srun,
# the Snakemake SLURM executor plugin), checked against the local run: every job must have been a SLURM job and the
# two tables must be the same (wall-clock columns aside); then a failing rule inside SLURM and its resubmission.
# (.ci/run then runs the tiny world's whole workflow: pytest -m pipeline, tests/test_pipeline_smoke.py.)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOCAL=$(mktemp -d /tmp/mars-ci-local.XXXX)
LOCAL7=$(mktemp -d /tmp/mars-ci-local7b.XXXX)
SLURM=$(mktemp -d /tmp/mars-ci-slurm.XXXX)
NAME=paper-0.5b-mirror

# The 0.5B rehearsal builds Tables 2, 5 and 9: every training method of the paper config (AR SFT, MARS with and
# without L_AR, block diffusion) on the hf world under 2 DDP processes, the paper-profile evaluations, the wall-clock
# bench and Jacobi decoding. Every other table and figure is the same code on other rows: the tiny world's whole
# workflow (pytest -m pipeline) builds all of them. Through SLURM, Table 9 (its trainings and evaluations): the bench
# is one more job of the same kind, and its wall-clock columns are not compared anyway.
SLURM_TABLES=table9
echo "== rehearsal of configs/paper-0.5b.yaml (Tables 2, 5, 9), local"
MARS_REHEARSAL_TABLES=table2,table5,$SLURM_TABLES MARS_REHEARSAL_OUT=$LOCAL timeout --signal=INT --kill-after=60 1200 \
  bash scripts/rehearsal.sh 0.5b
# The 7B config differs from the 0.5B one in its model shapes, launch and Table 6 (speculative decoding with a
# smaller hub draft): its rehearsal builds Table 6 only (AR SFT, MARS and both drafts trained in the 7B config's
# shapes); every other table and figure is the 0.5B's code.
echo "== rehearsal of configs/paper-7b.yaml (Table 6), local"
MARS_REHEARSAL_TABLES=table6 MARS_REHEARSAL_OUT=$LOCAL7 timeout --signal=INT --kill-after=60 1200 \
  bash scripts/rehearsal.sh 7b

echo "== rehearsal of configs/paper-0.5b.yaml ($SLURM_TABLES) through SLURM"
bash scripts/slurm_cluster.sh start
trap 'bash scripts/slurm_cluster.sh stop' EXIT
cp -r "$LOCAL/mirror" "$SLURM/mirror"  # the same stand-ins (a mirror is rebuilt only where it is missing)
sed -i "s#$LOCAL/mirror#$SLURM/mirror#g" "$SLURM/mirror/"*.yaml
MARS_REHEARSAL_TABLES=$SLURM_TABLES MARS_REHEARSAL_OUT=$SLURM timeout --signal=INT --kill-after=60 1800 \
  bash scripts/rehearsal.sh 0.5b --slurm

jobs=$(grep -c "^\[.*\]$\|^rule \|^localrule " "$SLURM/run.log" || true)
submitted=$(grep -cE "submitted with SLURM jobid|SLURM jobid [0-9]+" "$SLURM/run.log" || true)
planned=$(grep -E "^total +[0-9]+" "$SLURM/run.log" | head -1 | awk '{print $2}')
echo "SLURM jobs submitted: $submitted of $planned planned jobs (the target rule 'all' runs locally)"
[ "$submitted" -ge $((planned - 1)) ] || { echo "not every job ran as a SLURM job"; exit 1; }

echo "== a failing rule inside SLURM, then the resubmission"
bash scripts/ci_slurm_failure.sh "$SLURM" "$NAME" table9 eval/ar_sft_5ep/jacobi-tau1-probability/gsm8k.json \
  --configfile "$ROOT/configs/paper-0.5b.yaml" \
  "$SLURM/mirror/$NAME.yaml" "$ROOT/configs/rehearsal.yaml"

echo "== tables: local vs SLURM"
.venv/bin/python scripts/compare_tables.py "$LOCAL/results/$NAME/tables" "$SLURM/results/$NAME/tables" \
  --tables "$SLURM_TABLES"
