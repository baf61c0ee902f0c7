#!/usr/bin/env bash
# One prepared GPU check (under 8 minutes on one H200-class GPU), for a session that is lent a GPU machine:
#   1. paper-scale costs on randomly initialised Qwen2.5-0.5B / 7B-shaped models (nothing is downloaded):
#      MARS vs AR SFT training step time and peak memory at max length 512, and one cached forward of 1 token vs a
#      B=4 window at batch 1/4/8/16 (python -m mars.bench.gpu_check);
#   2. the offline rehearsal of configs/paper-0.5b.yaml on CUDA in bf16 (scripts/rehearsal.sh), unless --small.
# Usage: scripts/gpu_check.sh [--small] [OUT_DIR]   (--small: a few-layer model on CPU, seconds; what CI tests)
# Results: OUT_DIR/gpu_check.json (default $OUT or results/gpu_check) and the rehearsal's tables.
set -euo pipefail
cd "$(dirname "$0")/.."
small=0
if [[ "${1:-}" == "--small" ]]; then small=1; shift; fi
out="${1:-${OUT:-results/gpu_check}}"
mkdir -p "$out"
python="${PYTHON:-python}"
if [[ $small == 1 ]]; then
    "$python" -m mars.bench.gpu_check --small --max-length 64 --train-batch 2 --reps 2 --batch-sizes 1,4 --context 32 \
        --output "$out/gpu_check.json" > /dev/null
    echo "[gpu_check] small run written to $out/gpu_check.json"
    exit 0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/nvidia_smi.csv"
"$python" -m mars.bench.gpu_check --output "$out/gpu_check.json" 2> "$out/gpu_check.log" > /dev/null
echo "[gpu_check] costs written to $out/gpu_check.json"
# The rehearsal on the GPU: eval.dtype auto = bf16 on CUDA, training bf16 (the paper configs); one process, since
# the machine has one GPU (configs/rehearsal.yaml asks for 2 CPU processes).
printf 'training:\n  processes: 1\n' > "$out/one_gpu.yaml"
MARS_BIN="$(dirname "$(command -v "$python")")" MARS_REHEARSAL_OUT="$out/rehearsal" \
    MARS_REHEARSAL_EXTRA_CONFIG="$out/one_gpu.yaml" timeout 300 bash scripts/rehearsal.sh 0.5b \
    > "$out/rehearsal.log" 2>&1 && echo "[gpu_check] rehearsal ok" \
    || echo "[gpu_check] rehearsal FAILED (see $out/rehearsal.log)"
