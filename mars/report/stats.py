"""The statistics of the tables: seed means, paired differences and their t intervals (Tables 2-4, the recipe study,
the scaling study)."""

from __future__ import annotations

import math
import statistics


def _mean(values: list[float]) -> float:
    values = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
    return sum(values) / len(values) if values else math.nan


def _std(values: list[float]) -> float:
    values = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
    return statistics.stdev(values) if len(values) > 1 else math.nan


def difference(a: list[float], b: list[float]) -> tuple[float, float, int]:
    """``a`` minus ``b`` over the training seeds both have, paired by seed (each list is a model's own seed, then
    ``seeds.extra`` in order; the seed-s run of a model starts from the seed-s run of its reference): the mean of
    the per-seed differences, its standard error (NaN with one pair) and the number of pairs. A model with one seed
    is compared with its reference's run of the same seed, not with the reference's seed mean."""
    n = min(len(a), len(b))
    diffs = [x - y for x, y in zip(a[:n], b[:n])]
    return _mean(diffs), _std(diffs) / math.sqrt(n) if n > 1 else math.nan, n


def verdict(delta: float, half: float) -> str:
    """``lower`` / ``higher`` when the 95 % interval of the paired difference excludes 0, ``within noise`` when it
    does not, ``one seed`` when there is no interval."""
    if math.isnan(half):
        return "one seed"
    if abs(delta) <= half:
        return "within noise"
    return "lower" if delta < 0 else "higher"


def t_halfwidth(se: float, n: int, level: float = 0.95) -> float:
    """Half-width of the two-sided ``level`` confidence interval of a mean difference over ``n`` paired seeds:
    Student's t with n - 1 degrees of freedom times the standard error (4.30 x SE at 3 seeds, not 2 x SE)."""
    if n < 2 or math.isnan(se):
        return math.nan
    from scipy.stats import t

    return float(t.ppf(0.5 + level / 2, n - 1)) * se


def item_paired_se(a: list[dict], b: list[dict]) -> float:
    """Standard error (points) of the difference of two evaluations' family averages, paired by test item: ``a``
    and ``b`` hold, per family in the same order, {item: score in [0, 1]} of the same model run's evaluation. Per
    family the per-item differences over the items both have give var/n; the average over F families has standard
    error 100 x sqrt(sum of var/n) / F. NaN when a family has fewer than two shared items (the paired differences
    of one evaluation each: the test-item noise of one training seed, not the seed-to-seed noise)."""
    total = 0.0
    for items_a, items_b in zip(a, b, strict=True):
        shared = sorted(set(items_a) & set(items_b))
        if len(shared) < 2:
            return math.nan
        diffs = [items_a[i] - items_b[i] for i in shared]
        total += statistics.variance(diffs) / len(diffs)
    return 100.0 * math.sqrt(total) / len(a) if a else math.nan
