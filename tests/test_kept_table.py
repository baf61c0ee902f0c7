"""scripts/kept_table.py: a table rendered from kept points equals the same table rendered from the live results
folder they were kept from; a missing kept record is one error line and no table."""

import importlib.util
import json
from pathlib import Path

import pandas as pd

from mars.pipeline import experiments as X
from mars.report.tables import make_table
from tests.report.test_tables import outputs

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = [str(ROOT / "configs" / n) for n in ("smollm2-135m.yaml", "smollm2-curve.yaml")]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


kept_table, keep_point = _script("kept_table"), _script("keep_point")


def test_a_table_from_kept_points_equals_the_live_one_and_a_missing_record_is_refused(tmp_path, capsys):
    cfg = kept_table.merged_config(CONFIGS)
    assert cfg["curve"]["models"] == ["mars_x1", "mars_x2", "mars_x4", "mars_x8"]  # the overlay applied
    assert cfg["training"]["learning_rate"] == 2.0e-5  # the base kept where the overlay is silent
    job, results, files = outputs(cfg, tmp_path, X.CURVE_TABLE)
    for path in files:  # what `mars eval` writes: keep_point keeps only its records
        record = json.loads(Path(path).read_text())
        Path(path).write_text(json.dumps({**record, "kind": "mars_eval"}))
    for n, model in enumerate(X.table_models(cfg, X.CURVE_TABLE)):
        metrics = {"optimizer_steps": 200 * (n + 1), "effective_batch": 16, "final_loss_mask": 1.0 / (n + 1)}
        (results / "models" / model / "metrics.json").write_text(json.dumps(metrics))
        keep_point.keep(results, model, tmp_path / "kept")

    live = tmp_path / "live" / "curve.csv"
    make_table(job, results, live, inputs=files)
    from_kept = tmp_path / "from_kept" / "curve.csv"
    argv = ["--configfile", *CONFIGS, "--kept", str(tmp_path / "kept"), "--name", "curve", "--output", str(from_kept)]
    assert kept_table.main(argv) == 0
    pd.testing.assert_frame_equal(pd.read_csv(from_kept), pd.read_csv(live))
    assert from_kept.with_suffix(".md").is_file() and from_kept.with_suffix(".tex").is_file()

    (tmp_path / "kept" / "mars_x4" / "eval" / "mars-tau0.95-probability" / "gsm8k.json").unlink()
    again = tmp_path / "again" / "curve.csv"
    capsys.readouterr()
    assert kept_table.main([*argv[:-1], str(again)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no kept record") and "mars_x4" in err[0]
    assert not again.exists()


def test_the_first_machines_published_curve_table_regenerates_from_its_kept_records(tmp_path):
    """docs/smollm2_curve_points/curve.csv is what the command in its points.yaml writes from the records beside it."""
    kept = ROOT / "docs" / "smollm2_curve_points"
    out = tmp_path / "curve.csv"
    argv = ["--configfile", *CONFIGS, str(kept / "points.yaml"), "--kept", str(kept), "--name", "curve"]
    assert kept_table.main([*argv, "--output", str(out)]) == 0
    pd.testing.assert_frame_equal(pd.read_csv(out), pd.read_csv(kept / "curve.csv"))
    assert list(pd.read_csv(out).model) == ["ar_sft", "mars_x1", "mars_x2", "mars_self_x2"]
