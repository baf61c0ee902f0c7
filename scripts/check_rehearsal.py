"""Check the outputs of an offline rehearsal (scripts/rehearsal.sh) of a paper config: every table and figure of
the paper came out, with the columns of the published tiny-world run (docs/tiny_run/tables: the same tables, code
and columns, so a column the paper configs lose shows here) and a value in every row of every benchmark column.

    python scripts/check_rehearsal.py RESULTS/paper-0.5b-mirror/tables RESULTS/paper-0.5b-mirror/paper_figures
Exit status 0 when complete; otherwise one line per problem.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "tiny_run" / "tables"
TABLES = ["table2", "table3", "table4", "table5", "table8", "table9", "ablations", "cost"]
# tables only some paper configs make, by the results folder's name (RESULTS/<name>/tables): Table 6 at 7B only
SHAPE_TABLES = {"paper-7b": ["table6"]}
FIGURES = ["fig1_shaded_generation", "fig3_pareto", "fig6_acceptance_metrics", "fig_wallclock"]
FAMILIES = ["ifeval", "bbh", "mmlu_pro", "gpqa", "gsm8k", "humaneval"]


def selected_tables() -> list[str]:
    """MARS_REHEARSAL_TABLES (scripts/rehearsal.sh): the rehearsal built only these tables and no figure."""
    return [t for t in os.environ.get("MARS_REHEARSAL_TABLES", "").split(",") if t]


def expected_tables(tables: Path) -> list[str]:
    if selected_tables():
        return selected_tables()
    config = Path(tables).resolve().parent.name
    return TABLES + [t for prefix, extra in SHAPE_TABLES.items() if config.startswith(prefix) for t in extra]


def reference_columns(name: str) -> list[str]:
    """The published tiny run's columns; Table 6 (not in it yet): mars speculate's and the paper's speed-up."""
    if (REFERENCE / f"{name}.csv").is_file():
        return list(pd.read_csv(REFERENCE / f"{name}.csv").columns)
    from mars.bench.speculative import FIELDS

    return [*FIELDS, "paper_speedup"]


def problems(tables: Path, figures: Path) -> list[str]:
    found = []
    for name in expected_tables(tables):
        path = tables / f"{name}.csv"
        if not path.is_file():
            found.append(f"{name}: missing ({path})")
            continue
        table, columns = pd.read_csv(path), reference_columns(name)
        if table.empty:
            found.append(f"{name}: no rows")
        missing = [c for c in columns if c not in table.columns]
        if missing:
            found.append(f"{name}: columns missing: {', '.join(missing)}")
        for column in [c for c in [*FAMILIES, "avg", "avg_accuracy", "accuracy", "tokens_per_s"] if c in table.columns]:
            if table[column].isna().any():
                found.append(f"{name}: column {column} has rows without a value")
    for stem in [] if selected_tables() else FIGURES:
        for suffix in (".png", ".pdf"):
            path = figures / f"{stem}{suffix}"
            if not path.is_file() or path.stat().st_size == 0:
                found.append(f"figure {stem}{suffix}: missing or empty ({path})")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[3].strip(), file=sys.stderr)
        return 2
    found = problems(Path(argv[0]), Path(argv[1]))
    for line in found:
        print(line)
    if not found:
        figures = 0 if selected_tables() else len(FIGURES)
        print(f"rehearsal complete: {len(expected_tables(Path(argv[0])))} tables, {figures} figures")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
