#!/usr/bin/env bash
# CI: the micro-rehearsal of configs/smollm2-135m.yaml (sizes: configs/rehearsal-smollm2.yaml). SmolLM2-135M-Instruct
# imported from its PyPI wheel, two optimizer steps each of AR SFT and MARS, the harness's HumanEval on one problem
# and the real-text loss of MARS at tau 0.95; then each output is checked. (The wall-clock bench, Table 5, is left
# out: it is the same job on another model, run by the smoke workflow and tests/test_generation.py, and the
# decoder's exactness on this model is tests/test_smollm2.py's. Its minutes pay for vLLM's CI step.)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d /tmp/mars-ci-smollm2.XXXX)
RESULTS=results/smollm2-135m
echo "== micro-rehearsal of configs/smollm2-135m.yaml in $OUT"
(cd "$OUT" && HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 timeout --signal=INT --kill-after=60 1200 "$ROOT/.venv/bin/snakemake" \
    --snakefile "$ROOT/Snakefile" --directory "$OUT" --cores all \
    --configfile "$ROOT/configs/smollm2-135m.yaml" "$ROOT/configs/rehearsal-smollm2.yaml" -- \
    $RESULTS/text_loss/mars_b4.json \
    $RESULTS/real/mars_b4/mars-tau0.95-probability/humaneval.json) > "$OUT/run.log" 2>&1 \
    || { tail -60 "$OUT/run.log"; exit 1; }
"$ROOT/.venv/bin/python" - "$OUT/$RESULTS" <<'PY'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
config = json.loads((out / "models" / "mars_b4" / "config.json").read_text())
assert config["model_type"] == "llama" and config["vocab_size"] == 49152, config  # the real model, not a stand-in
run = json.loads((out / "models" / "mars_b4" / "run_config.json").read_text())["spec"]
assert (run["method"], run["block_size"], run["max_steps"]) == ("mars", 4, 2), run
real = json.loads((out / "real" / "mars_b4" / "mars-tau0.95-probability" / "humaneval.json").read_text())
assert real["task"] == "humaneval_instruct" and real["n_samples"]["humaneval_instruct"]["original"] == 164, real
loss = json.loads((out / "text_loss" / "mars_b4.json").read_text())
assert loss["files"] == 2 and loss["tokens"] > 0 and 0 < loss["loss"] < 20, loss
print(f"smollm2 micro-rehearsal: humaneval pass@1 {real['metrics']}, text loss {loss['loss']:.3f}")
PY
rm -rf "$OUT"
