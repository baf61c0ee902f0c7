"""Compare the tables of two pipeline runs, ignoring wall-clock and memory columns (they differ between any two runs).

    python scripts/compare_tables.py RUN_A/results/smoke/tables RUN_B/results/smoke/tables [--tables table5,table9]
Exit status 0 when every table (or every named one; both runs must have made it) has the same rows, columns and
(non-timing) values.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pandas as pd

# wall-clock and memory columns differ between any two runs; everything else must match
TIMING = re.compile(r"(time|_s$|tokens_per_s|speedup|efficiency|ideal|t_1token|t_window|rss|s_per_step)")


def main(a: str, b: str, tables: list[str] | None = None) -> int:
    left, right = sorted(Path(a).glob("*.csv")), sorted(Path(b).glob("*.csv"))
    if tables:  # only these, and both runs must have them
        left = [Path(a) / f"{t}.csv" for t in tables if (Path(a) / f"{t}.csv").is_file()]
        right = [Path(b) / f"{t}.csv" for t in tables if (Path(b) / f"{t}.csv").is_file()]
        if len(left) != len(tables):
            print(f"different table sets: {tables} asked, {[p.name for p in left]} vs {[p.name for p in right]}")
            return 1
    if [p.name for p in left] != [p.name for p in right] or not left:
        print(f"different table sets: {[p.name for p in left]} vs {[p.name for p in right]}")
        return 1
    status = 0
    for x, y in zip(left, right):
        fx, fy = pd.read_csv(x), pd.read_csv(y)
        keep = [c for c in fx.columns if c.startswith("paper_") or not TIMING.search(c)]  # the paper's are fixed
        if list(fx.columns) != list(fy.columns):
            print(f"{x.name}: differs in its columns: {list(fx.columns)} vs {list(fy.columns)}")
            status = 1
        elif len(fx) != len(fy):
            print(f"{x.name}: differs in its rows: {len(fx)} vs {len(fy)}")
            status = 1
        elif not fx[keep].equals(fy[keep]):
            cols = [c for c in keep if not fx[c].equals(fy[c])]
            print(f"{x.name}: differs in {cols}")
            for c in cols:  # the differing values, row by row, so that a CI log alone shows what changed
                for i in fx.index[(fx[c] != fy[c]) & ~(fx[c].isna() & fy[c].isna())]:
                    print(f"  row {i}: {c} = {fx[c][i]} vs {fy[c][i]}")
            status = 1
        else:
            print(f"{x.name}: same ({len(fx)} rows, {len(keep)} of {len(fx.columns)} columns compared)")
    return status


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--tables", type=lambda text: text.split(","), help="compare only these (comma-separated)")
    args = parser.parse_args()
    sys.exit(main(args.a, args.b, tables=args.tables))
