#!/usr/bin/env bash
# The offline rehearsal of a paper config: configs/paper-<shape>.yaml run end to end through the same rules, with
# the model, the SFT data set and the harness data sets pointed at local stand-ins written by `mars mirror` (the way
# a user of an offline cluster points them at a mirror), and the sizes of configs/rehearsal.yaml.
#   scripts/rehearsal.sh 0.5b|7b [--slurm]     (--slurm: through the SLURM profile; a cluster must be up)
# Work folder: $MARS_REHEARSAL_OUT (default: a new /tmp/mars-rehearsal-<shape>.XXXX); extra config files to lay over
# (e.g. training.processes: 1 on a 1-GPU machine): $MARS_REHEARSAL_EXTRA_CONFIG. No network is used: the hub is off.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
shape=${1:?usage: scripts/rehearsal.sh 0.5b|7b [--slurm]}
[[ $shape == 0.5b || $shape == 7b ]] || { echo "error: shape must be 0.5b or 7b, got '$shape'" >&2; exit 2; }
profile=()
if [[ "${2:-}" == "--slurm" ]]; then
    profile=(--profile "$ROOT/slurm" --slurm-status-command squeue --slurm-init-seconds-before-status-checks 1)
fi
OUT=${MARS_REHEARSAL_OUT:-$(mktemp -d "/tmp/mars-rehearsal-$shape.XXXX")}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BIN=${MARS_BIN:-$ROOT/.venv/bin}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export MLFLOW_TRACKING_URI=${MLFLOW_TRACKING_URI:-sqlite:///$OUT/mlflow.db}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
[[ -d "$OUT/mirror" ]] || "$BIN/mars" mirror --output "$OUT/mirror" --shape "$shape" --records 40 > "$OUT/mirror.log" 2>&1
name=paper-$shape-mirror
shape_sizes=()  # the rehearsal sizes of what only this shape's config has (configs/rehearsal-7b.yaml: Table 6)
[[ -f "$ROOT/configs/rehearsal-$shape.yaml" ]] && shape_sizes=("$ROOT/configs/rehearsal-$shape.yaml")
echo "== rehearsal of configs/paper-$shape.yaml in $OUT ${profile:+(SLURM)}"
# MARS_REHEARSAL_TABLES=table2,table6: build (and check) only those tables and what they need, no figures
targets=()
for table in ${MARS_REHEARSAL_TABLES:+${MARS_REHEARSAL_TABLES//,/ }}; do targets+=("results/$name/tables/$table.csv"); done
(cd "$OUT" && "$BIN/snakemake" --snakefile "$ROOT/Snakefile" --directory "$OUT" --cores all "${profile[@]}" \
    --configfile "$ROOT/configs/paper-$shape.yaml" "$OUT/mirror/$name.yaml" "$ROOT/configs/rehearsal.yaml" \
    "${shape_sizes[@]}" \
    ${MARS_REHEARSAL_EXTRA_CONFIG:+"$MARS_REHEARSAL_EXTRA_CONFIG"} -- "${targets[@]}") > "$OUT/run.log" 2>&1 \
    || { tail -60 "$OUT/run.log"; exit 1; }
"$BIN/python" "$ROOT/scripts/check_rehearsal.py" "$OUT/results/$name/tables" "$OUT/results/$name/paper_figures"
