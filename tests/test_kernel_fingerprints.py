"""benchmarks/kernel_knobs.py's fingerprints: two machines' short runs compared on their weights' sha256."""

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "kernel_knobs.py"
spec = importlib.util.spec_from_file_location("kernel_knobs", SCRIPT)
kernel_knobs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(kernel_knobs)
KEPT = sorted((SCRIPT.parents[1] / "docs" / "kernel_fingerprints").glob("*.json"))


def _record(world: str, lm: str, mars: str) -> dict:
    rows = [{"case": "repro/reference", "method": m, "sha256": h} for m, h in (("lm", lm), ("mars", mars))]
    machine = {"cpu_id": "25/1/1", "cpu_isas": "avx2"}
    return {"machine": machine, "steps": 30, "world": {"init/model.safetensors": world}, "rows": rows}


def test_fingerprints_of_the_same_world_are_compared_case_by_case(tmp_path):
    (tmp_path / "other.json").write_text(json.dumps(_record("w", "a", "b")))
    (tmp_path / "elsewhere.json").write_text(json.dumps(_record("another world", "a", "b")))
    lines = kernel_knobs.compare(_record("w", "a", "c"), [tmp_path / "other.json", tmp_path / "elsewhere.json"])
    assert lines == [
        "other.json (25/1/1, avx2): repro/reference lm: same bits",
        "other.json (25/1/1, avx2): repro/reference mars: DIFFERENT bits",
        "elsewhere.json (25/1/1, avx2): another world or step count, not comparable",
    ]


def test_the_kept_fingerprints_name_their_machine_world_and_weights():
    assert KEPT, "docs/kernel_fingerprints/ holds no machine's fingerprint"
    for path in KEPT:
        record = json.loads(path.read_text())
        assert {"cpu_id", "cpu_isas", "torch", "mkl"} <= set(record["machine"])
        assert "init/model.safetensors" in record["world"]
        cases = {(r["case"], r["method"]) for r in record["rows"]}
        assert {("reference", "lm"), ("repro/reference", "mars")} <= cases
        assert all(len(r["sha256"]) == 64 for r in record["rows"])
