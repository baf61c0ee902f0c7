"""The learning curve's declared rules (docs/smollm2_curve.md, "Rules, fixed now" and the second amendment), applied
to its table (``curve.csv``) so that no rule is applied by eye:

- the stopping rule: 8x is not trained only if tokens per forward at the curve's tau and the lossless mode's tokens
  per forward on the GSM8K family both rose by less than 0.03 from 2x to 4x (on the table's two decimals);
- the Table 5 model: among the MARS models (the curve's points and the self-distilled arms), the one with the most
  tokens per forward at the curve's tau whose average there is within 1.5 points of its own tau-1.0 average; if none
  is, the one with the most lossless tokens per forward on the GSM8K family, outside the rule;
- the extrapolation, used if the goal is not met at 8x: a least-squares line of tokens per forward at the curve's
  tau against log2(example passes) over the curve's points, and the example passes at which it reaches a target.

    python -m mars.report.curve_rules results/smollm2-curve/tables/curve.csv [--targets 1.25 1.5 1.9]
"""

from __future__ import annotations

import argparse
import math
import sys

import pandas as pd

from mars.pipeline.config import ConfigError

FLAT = 0.03  # the stopping rule's "rose by less than"
WITHIN = 1.5  # the Table 5 rule's accuracy drop, in points of the six-family average
TARGETS = (1.25, 1.5, 1.9)  # break-even on this CPU, the goal's tokens per forward, about 1.5x HF generate
COLUMNS = {"model", "role", "example_passes", "change_fast_vs_tau1", "tpf_fast", "lossless_tpf_gsm8k"}


def curve_points(table: pd.DataFrame) -> pd.DataFrame:
    """The curve's MARS points, by budget, each with its multiple of the first point's example passes."""
    points = table[table.role == "mars"].sort_values("example_passes").reset_index(drop=True)
    if points.empty:
        raise ConfigError("the curve table has no MARS point (role 'mars')")
    return points.assign(budget=points.example_passes / points.example_passes.iloc[0])


def stops_after_4x(table: pd.DataFrame) -> bool:
    """The stopping rule: both tokens per forward (the curve's tau, six families; lossless, GSM8K family) rose by
    less than FLAT from the 2x point to the 4x point."""
    points = curve_points(table).set_index("budget")
    if not {2.0, 4.0} <= set(points.index):
        raise ConfigError("the stopping rule needs the points at 2x and 4x the first point's example passes")
    columns = ["tpf_fast", "lossless_tpf_gsm8k"]
    rise = points.loc[4.0, columns] - points.loc[2.0, columns]
    if rise.isna().any():
        raise ConfigError("the stopping rule needs both tokens per forward at 2x and at 4x")
    # on the table's values (two decimals): 2.03 - 2.00 is 0.0299999..., which is not "less than 0.03"
    return bool((rise.astype(float).round(6) < FLAT).all())


def table5_model(table: pd.DataFrame) -> tuple[str, bool]:
    """(the model Table 5 is run on, whether it meets the rule); not meeting it means the fallback choice."""
    candidates = table[table.role.isin(["mars", "self_distilled"])]
    if candidates.empty:
        raise ConfigError("the curve table has no MARS model")
    within = candidates[candidates.change_fast_vs_tau1.abs().round(6) <= WITHIN]
    if within.tpf_fast.notna().any():
        return str(within.loc[within.tpf_fast.idxmax(), "model"]), True
    if candidates.lossless_tpf_gsm8k.isna().all():
        raise ConfigError("no MARS model of the curve table has lossless tokens per forward")
    return str(candidates.loc[candidates.lossless_tpf_gsm8k.idxmax(), "model"]), False


def tpf_line(table: pd.DataFrame) -> tuple[float, float]:
    """(slope, intercept) of tokens per forward at the curve's tau against log2(example passes), least squares over
    the curve's points."""
    points = curve_points(table)
    if len(points) < 2:
        raise ConfigError("a line needs at least two curve points")
    x = points.example_passes.map(math.log2)
    y = points.tpf_fast
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()
    return float(slope), float(y.mean() - slope * x.mean())


def passes_for(target: float, slope: float, intercept: float) -> float:
    """The example passes at which the line reaches ``target`` tokens per forward (inf if it never rises)."""
    return 2 ** ((target - intercept) / slope) if slope > 0 else math.inf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mars.report.curve_rules", description=__doc__.splitlines()[0])
    parser.add_argument("curve_csv")
    parser.add_argument("--targets", type=float, nargs="+", default=list(TARGETS))
    args = parser.parse_args(argv)
    try:
        try:
            table = pd.read_csv(args.curve_csv)
        except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise ConfigError(f"cannot read the curve table {args.curve_csv}: {exc}") from exc
        if missing := sorted(COLUMNS - set(table.columns)):
            raise ConfigError(f"{args.curve_csv} is not a curve table: it lacks {', '.join(missing)}")
        budgets = sorted(curve_points(table).budget)
        if budgets != [1.0, 2.0, 4.0, 8.0]:  # the declared curve; fewer points: what the rules say so far
            print(f"provisional: the table has the points {', '.join(f'{b:g}x' for b in budgets)} of 1x, 2x, 4x, 8x")
        print(
            f"tau of the fast decoding: {', '.join(f'{t:g}' for t in table.get('tau', pd.Series()).dropna().unique())}"
        )
        model, within = table5_model(table)
        print(f"Table 5 model: {model} ({'by the rule' if within else 'outside the rule: none within 1.5 points'})")
        if {2.0, 4.0} <= set(budgets):
            print(f"stopping rule: {'8x is not trained (flat from 2x to 4x)' if stops_after_4x(table) else 'go on'}")
        slope, intercept = tpf_line(table)
        line = f"{intercept:.4f} + {slope:.4f} * log2(example passes)"
        print(f"line over {len(budgets)} points: tokens per forward = {line}")
        for target in args.targets:
            passes = passes_for(target, slope, intercept)
            print(f"  {target:g} tokens per forward at about {passes:,.0f} example passes")
    except ConfigError as exc:
        print(f"mars.report.curve_rules: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
