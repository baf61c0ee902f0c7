"""scripts/compare_tables.py (CI's local-vs-SLURM check): timing columns ignored, every other column compared, the
differing ones named with their values."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_tables.py"


def load():
    spec = importlib.util.spec_from_file_location("compare_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write(folder: Path, **columns) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(columns).to_csv(folder / "table5.csv", index=False)
    return str(folder)


def test_timing_columns_are_ignored_and_the_rest_compared(tmp_path, capsys):
    compare = load().main
    base = dict(setting=["a", "b"], tokens=[10, 12], time_s=[1.0, 2.0], ideal_min=[1.1, 1.2],
                paper_speedup_vs_ar_kv=[1.71, None])  # fmt: skip
    left = write(tmp_path / "l", **base)
    # the timing-derived columns (time_s, ideal_min) differ between any two runs
    assert compare(left, write(tmp_path / "r1", **{**base, "time_s": [3.0, 4.0], "ideal_min": [0.9, 1.0]})) == 0
    assert "table5.csv: same (2 rows, 3 of 5 columns compared)" in capsys.readouterr().out
    # a measured count differs: named, with the row's values
    assert compare(left, write(tmp_path / "r2", **{**base, "tokens": [10, 13]})) == 1
    out = capsys.readouterr().out
    assert "differs in ['tokens']" in out and "row 1: tokens = 12 vs 13" in out
    # the paper's numbers are compared although their name says speedup
    assert compare(left, write(tmp_path / "r3", **{**base, "paper_speedup_vs_ar_kv": [1.6, None]})) == 1
    assert "paper_speedup_vs_ar_kv" in capsys.readouterr().out
    assert compare(left, write(tmp_path / "r4", **{k: v[:1] for k, v in base.items()})) == 1
    assert "differs in its rows: 2 vs 1" in capsys.readouterr().out


def test_named_tables_only_and_both_runs_must_have_them(tmp_path, capsys):
    """CI's SLURM run builds two tables of the local run's nine: only the named ones are compared."""
    compare = load().main
    left = write(tmp_path / "l", setting=["a"], tokens=[10])
    pd.DataFrame(dict(row=[1])).to_csv(tmp_path / "l" / "table2.csv", index=False)  # only the local run made it
    right = write(tmp_path / "r", setting=["a"], tokens=[10])
    assert compare(left, right) == 1  # the whole sets differ
    assert compare(left, right, tables=["table5"]) == 0
    assert "table5.csv: same" in capsys.readouterr().out
    assert compare(left, right, tables=["table5", "table2"]) == 1  # the SLURM run lacks table2
    assert "different table sets" in capsys.readouterr().out
