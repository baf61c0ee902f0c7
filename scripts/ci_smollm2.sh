#!/usr/bin/env bash
# CI: the micro-rehearsal of configs/smollm2-135m.yaml (sizes: configs/rehearsal-smollm2.yaml). SmolLM2-135M-Instruct
# imported from its PyPI wheel, two optimizer steps each of AR SFT and MARS, the harness's HumanEval on one problem,
# the real-text loss of MARS at tau 0.95 and one wall-clock bench repetition (Table 5's job: 28 s idle); then each
# output is checked.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$(mktemp -d /tmp/mars-ci-smollm2.XXXX)
RESULTS=results/smollm2-135m
echo "== micro-rehearsal of configs/smollm2-135m.yaml in $OUT"
(cd "$OUT" && HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 timeout --signal=INT --kill-after=60 1200 "$ROOT/.venv/bin/snakemake" \
    --snakefile "$ROOT/Snakefile" --directory "$OUT" --cores all \
    --configfile "$ROOT/configs/smollm2-135m.yaml" "$ROOT/configs/rehearsal-smollm2.yaml" -- \
    $RESULTS/text_loss/mars_b4.json \
    $RESULTS/real/mars_b4/mars-tau0.95-probability/humaneval.json $RESULTS/bench/bench.csv) > "$OUT/run.log" 2>&1 \
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
bench = json.loads((out / "bench" / "bench.json").read_text())
assert bench["cpu_linear"] == "onednn_packed" and bench["block_size"] == 4, bench  # the config's kernel and window
rows = {r["setting"]: r for r in bench["rows"]}
# the config's decoders (bench.settings), at the rehearsal's one cache block size
assert sorted(rows) == sorted(["ar_hf_kv", "mars_tau1", "mars_block_4", "mars_authors_block_4", "mars_cursor",
                               "mars_lossless"]), sorted(rows)
assert rows["mars_lossless"]["tokens"] == rows["mars_tau1"]["tokens"], rows  # lossless: greedy's tokens
print(f"smollm2 micro-rehearsal: humaneval pass@1 {real['metrics']}, text loss {loss['loss']:.3f}, "
      f"bench mars_cursor {rows['mars_cursor']['speedup_vs_ar_kv']:.2f}x")
PY
rm -rf "$OUT"
