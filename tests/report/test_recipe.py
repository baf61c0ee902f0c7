"""mars.report.recipe (the recipe study's table) on hand-made evaluation files: seed averages, paired differences and
their t intervals against values worked out here by hand."""

import json
from pathlib import Path

import pandas as pd
import pytest

from mars.pipeline.experiments import FAMILIES
from mars.report import recipe


def write(results: Path, model: str, avg: float) -> None:
    """tau 1.0 results of ``model`` whose six families average ``avg`` % (family scores avg - 2.5 .. avg + 2.5)."""
    setting = recipe.setting(model)
    for i, path in enumerate(setting.files(results)):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        value = (avg + i - 2.5) / 100
        record = {"task": f"tiny_{FAMILIES[i]}", "family": FAMILIES[i], "primary_metric": "exact_match",
                  "metrics": {"exact_match": {"value": value}},
                  "decoding": {"tokens_per_forward": 1.0, "generated_tokens": 10, "forwards": 10}}  # fmt: skip
        Path(path).write_text(json.dumps(record))


def test_differences_intervals_and_the_learning_rate_column(tmp_path):
    results = tmp_path / "results"
    averages = {"ar_sft_5ep": [55, 55, 55], "ar_sft_5ep_cont": [55, 54, 57], "mars_b4": [50, 51, 51]}
    for _, mars, cont in recipe.ROWS:
        averages.setdefault(mars, [50, 51, 51])
        averages.setdefault(cont, [55, 54, 57])
    for model, values in averages.items():
        for seed, value in enumerate(values):
            write(results, recipe.seed_name(model, seed), value)
    for _, mars, _ in recipe.ROWS:
        folder = results / "models" / mars
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "run_config.json").write_text(json.dumps({"spec": {"learning_rate": 3e-4, "w_ar": 1.0}}))

    table = recipe.table(results)
    row = table.iloc[0]
    # MARS - continuation per seed: -5, -3, -6 -> mean -14/3; sd of (-5, -3, -6) = sqrt(7/3); SE = sd / sqrt(3);
    # t(0.975, 2) = 4.302653
    assert row.mars_minus_cont == pytest.approx(-14 / 3)
    assert row.mars_minus_cont_ci95 == pytest.approx(4.302653 * (7 / 3) ** 0.5 / 3**0.5, rel=1e-5)
    assert row.mars_minus_cont_verdict == "lower"  # |-4.67| > 3.80
    # MARS - AR SFT: -5, -4, -4 -> mean -13/3, sd sqrt(1/3)
    assert row.mars_minus_ar == pytest.approx(-13 / 3)
    assert row.mars_minus_ar_ci95 == pytest.approx(4.302653 * (1 / 3) ** 0.5 / 3**0.5, rel=1e-5)
    assert row.mars_seeds == "50.00;51.00;51.00" and row.n_seeds == 3
    table.to_csv(tmp_path / "t.csv", index=False)
    assert pd.read_csv(tmp_path / "t.csv", dtype=str).learning_rate[0] == "0.0003"  # never rounded to 0.0
