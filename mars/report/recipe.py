"""The recipe study (docs/recipe_study.md): is MARS's gap to the compute-matched AR continuation in the tiny world a
recipe difference, the training regime, or MARS's own cost?

Declared once, here: each row is one training setting of MARS B=4 and the AR continuation it is compared with
(the same learning rate), both started from AR SFT, three training seeds paired by seed, tau 1.0 average over the
six families. The models are entries of ``configs/recipe-study.yaml`` (an overlay on ``config.yaml``).

    python -m mars.report.recipe targets [--results results/tiny]      the evaluation files the study reads
    python -m mars.report.recipe table --results results/tiny --output results/tables/recipe.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from mars.pipeline.config import ConfigError
from mars.pipeline.experiments import FAMILIES, Setting
from mars.report.collect import collect_evals, read_json
from mars.report.stats import _mean, difference, t_halfwidth, verdict
from mars.report.tables import write_table

AR_SFT = "ar_sft_5ep"
SEEDS = (0, 1, 2)
# (label, MARS model, its compute-matched AR continuation)
ROWS = (
    ("(i) this project's recipe", "mars_b4", "ar_sft_5ep_cont"),
    ("(ii) authors' normalisation and EOS padding", "mars_b4_authors", "ar_sft_5ep_cont"),
    ("(iii) learning rate 3e-4", "mars_b4_lr3e-4", "ar_cont_lr3e-4"),
    ("(iii) learning rate 1e-4", "mars_b4_lr1e-4", "ar_cont_lr1e-4"),
    ("(iv) w_AR = 2", "mars_b4_war2", "ar_sft_5ep_cont"),
)
RECIPE_KEYS = ("learning_rate", "w_ar", "loss_normalization", "pad_to_block", "loss_turns", "mask_loss_weighting")


def seed_name(model: str, seed: int) -> str:
    return model if seed == 0 else f"{model}_seed{seed}"


def setting(model: str) -> Setting:
    """tau 1.0 on the six families: one token per forward, the model's own greedy decoding."""
    return Setting(model, "ar" if model.startswith("ar_") else "mars", 1.0)


def models() -> list[str]:
    names = {AR_SFT} | {m for _, mars, cont in ROWS for m in (mars, cont)}
    return sorted(seed_name(m, s) for m in names for s in SEEDS)


def targets(results: str | Path) -> list[str]:
    return [f for m in models() for f in setting(m).files(results)]


def table(results: str | Path) -> pd.DataFrame:
    results = Path(results)
    evals = collect_evals(targets(results))

    def avg(model: str) -> float:
        found = evals[evals.model == model]
        scores = {r.family: r.score for r in found.itertuples()}
        missing = [f for f in FAMILIES if f not in scores]
        if missing:
            raise ConfigError(f"no tau 1.0 result for {model} {missing[0]}")
        return _mean([scores[f] for f in FAMILIES])

    def seeds(model: str) -> list[float]:
        return [avg(seed_name(model, s)) for s in SEEDS]

    ar = seeds(AR_SFT)
    rows = []
    for label, mars, cont in ROWS:
        m, c = seeds(mars), seeds(cont)
        spec = read_json(results / "models" / mars / "run_config.json")["spec"]
        row = {"setting": label, "mars": mars, "continuation": cont, **{k: spec.get(k) for k in RECIPE_KEYS}}
        row["learning_rate"] = f"{row['learning_rate']:g}"  # (a number would be rounded to 0.0 with the scores)
        row.update(mars_avg=_mean(m), continuation_avg=_mean(c), ar_sft_avg=_mean(ar))
        for name, ref in (("cont", c), ("ar", ar)):
            delta, se, n = difference(m, ref)
            half = t_halfwidth(se, n)
            row.update(
                {
                    f"mars_minus_{name}": delta,
                    f"mars_minus_{name}_ci95": half,
                    f"mars_minus_{name}_verdict": verdict(delta, half),
                }
            )
        row.update(
            n_seeds=len(SEEDS),
            mars_seeds=";".join(f"{v:.2f}" for v in m),
            continuation_seeds=";".join(f"{v:.2f}" for v in c),
            ar_sft_seeds=";".join(f"{v:.2f}" for v in ar),
        )
        rows.append(row)
    return pd.DataFrame(rows)


CAPTION = (
    "The recipe study: MARS B=4 minus its compute-matched AR continuation and minus AR SFT (tau 1.0 average of the "
    "six families, %), paired over 3 training seeds, 95 % t intervals."
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mars.report.recipe", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=("targets", "table"))
    parser.add_argument("--results", default="results/tiny", help="the tiny run's results folder")
    parser.add_argument("--output", help="table: the CSV to write (a .md beside it)")
    args = parser.parse_args(argv)
    try:
        if args.what == "targets":
            print("\n".join(targets(args.results)))
            return 0
        if not args.output:
            raise ConfigError("table needs --output")
        write_table(table(args.results), args.output, CAPTION)
    except ConfigError as exc:
        print(f"mars.report.recipe: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
