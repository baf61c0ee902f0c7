"""The scaling study in two figures, from ``scaling.csv`` (and the checkpoints' training logs):

``fig_scaling``   MARS, MARS w/o L_AR and the AR continuation minus AR SFT (tau = 1.0 average, error bars: the
                  test-item standard error) against parameters (model-size axis) and SFT records (SFT-set axis);
``fig_heldout``   held-out next-token loss over the second stage (MARS, w/o L_AR, AR continuation), one panel per
                  point, with AR SFT's final held-out and training-record losses as reference lines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from mars.pipeline.config import ConfigError
from mars.report.plotting import plt, save, setup

SERIES = (("mars", "MARS", "o", "-"), ("nolar", "MARS w/o L_AR", "x", "--"), ("cont", "AR continuation", "s", ":"))


def scaling(scaling_csv: str, stem: str) -> list[Path]:
    setup()
    table = pd.read_csv(scaling_csv)
    default = table[table.axis == "default"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=True)
    for ax, axis, x, label in (
        (axes[0], "model size", "parameters", "parameters"),
        (axes[1], "SFT set size", "sft_records", "SFT records"),
    ):
        points = pd.concat([default, table[table.axis == axis]]).sort_values(x)
        for key, name, marker, style in SERIES:
            ax.errorbar(
                points[x],
                points[f"{key}_minus_ar"],
                yerr=points[f"{key}_minus_ar_se_test"],
                marker=marker,
                linestyle=style,
                capsize=3,
                label=name,
            )
        ax.axhline(0.0, color="black", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_title(f"{axis} (others as the default)")
    axes[0].set_ylabel("minus AR SFT, tau = 1.0 avg (points)")
    # the bars are the test-item error only: a point with one seed has no seed error (scaling.csv has both)
    fig.text(0.01, -0.1, "error bars: test-item standard error; seed-to-seed spread not included", fontsize=7)
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    return save(fig, Path(stem))


def _curve(results: Path, model: str) -> tuple[list, list]:
    path = results / "models" / model / "run_config.json"
    try:
        history = json.loads(path.read_text())["log_history"]
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"{path} is missing or has no log history: {exc}") from None
    logged = [h for h in history if "eval_heldout_loss" in h]
    return [h["step"] for h in logged], [h["eval_heldout_loss"] for h in logged]


def heldout(scaling_csv: str, results: str, stem: str) -> list[Path]:
    setup()
    table = pd.read_csv(scaling_csv)
    fig, axes = plt.subplots(1, len(table), figsize=(2.6 * len(table), 2.8), sharey=True, squeeze=False)
    for ax, point in zip(axes[0], table.itertuples()):
        for key, name, marker, style in SERIES:
            steps, losses = _curve(Path(results), getattr(point, f"{key}_model"))
            ax.plot(steps, losses, marker=marker, markersize=3, linestyle=style, label=name)
        ax.axhline(point.ar_heldout_loss, color="black", linewidth=1, label="AR SFT: held-out")
        ax.axhline(point.ar_train_loss, color="grey", linewidth=1, linestyle="--", label="AR SFT: training records")
        ax.set_title(f"{point.point} ({point.parameters / 1e6:.2f}M, {point.sft_records} rec.)", fontsize=8)
        ax.set_xlabel("step of the second stage")
    axes[0][0].set_ylabel("held-out next-token loss")
    axes[0][-1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    return save(fig, Path(stem))
