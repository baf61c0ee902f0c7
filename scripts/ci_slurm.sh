#!/usr/bin/env bash
# CI: the smoke pipeline through a real single-node SLURM cluster (sbatch, srun, the Snakemake SLURM executor
# plugin), checked against a local run of the same config: every job must have been a SLURM job and the tables
# must be the same (wall-clock columns aside). The command is the one users type, plus the two flags a cluster
# without slurmdbd needs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SNAKEMAKE="$ROOT/.venv/bin/snakemake --snakefile $ROOT/Snakefile --configfile $ROOT/configs/smoke.yaml"
LOCAL=$(mktemp -d /tmp/mars-ci-local.XXXX)
SLURM=$(mktemp -d /tmp/mars-ci-slurm.XXXX)
export MLFLOW_TRACKING_URI="sqlite:///$LOCAL/mlflow.db" OMP_NUM_THREADS=1

echo "== local smoke run"
timeout --signal=INT --kill-after=60 900 $SNAKEMAKE --directory "$LOCAL" --cores all --quiet > "$LOCAL/run.log" 2>&1 \
  || { tail -50 "$LOCAL/run.log"; exit 1; }

echo "== smoke run through SLURM"
bash scripts/slurm_cluster.sh start
trap 'bash scripts/slurm_cluster.sh stop' EXIT
export MLFLOW_TRACKING_URI="sqlite:///$SLURM/mlflow.db"
(cd "$SLURM" && timeout --signal=INT --kill-after=60 1500 $SNAKEMAKE --directory "$SLURM" --cores all \
  --profile "$ROOT/slurm" --slurm-status-command squeue --slurm-init-seconds-before-status-checks 1) \
  > "$SLURM/run.log" 2>&1 || { tail -80 "$SLURM/run.log"; exit 1; }

jobs=$(grep -c "^\[.*\]$\|^rule \|^localrule " "$SLURM/run.log" || true)
submitted=$(grep -cE "submitted with SLURM jobid|SLURM jobid [0-9]+" "$SLURM/run.log" || true)
planned=$(grep -E "^total +[0-9]+" "$SLURM/run.log" | head -1 | awk '{print $2}')
echo "SLURM jobs submitted: $submitted of $planned planned jobs (the target rule 'all' runs locally)"
[ "$submitted" -ge $((planned - 1)) ] || { echo "not every job ran as a SLURM job"; exit 1; }

echo "== a failing rule inside SLURM, then the resubmission"
bash scripts/ci_slurm_failure.sh "$SLURM"

echo "== tables: local vs SLURM"
.venv/bin/python scripts/compare_tables.py "$LOCAL/results/smoke/tables" "$SLURM/results/smoke/tables"
