"""Figure 3: accuracy vs tokens per forward over the tau sweep (Pareto curves), per block size, with and without
L_AR, on the GSM8K- and HumanEval-like tasks, with AR SFT (tau = 1.0, one token per forward) as a reference line.
Table 8's lossless rows (decoding mars_lossless: exactly the greedy output) are points of their own, stars in the
colour of their model's curve: the model's tau-1.0 accuracy at more than one token per forward."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mars.pipeline.experiments import LOSSLESS
from mars.report.plotting import plt, save, setup


def main(table8_csv: str, table2_csv: str, stem: str) -> list[Path]:
    setup()
    table8 = pd.read_csv(table8_csv)
    sweep, lossless = table8[table8["decoding"] != LOSSLESS], table8[table8["decoding"] == LOSSLESS]
    reference = pd.read_csv(table2_csv)
    ar = reference[reference["row"] == "AR SFT (5 ep)"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=False)
    for ax, task, label in ((axes[0], "gsm8k", "GSM8K-like"), (axes[1], "humaneval", "HumanEval-like")):
        # legend order: with L_AR before without, then by block size (4, 8, 16; not the string order 16, 4, 8)
        # (block size and SFT loss are Table 8's columns, read from the checkpoints' run configs)
        curves = sweep.drop_duplicates("model").sort_values(["sft_loss", "block_size"], ascending=[False, True])
        colours = {}
        for curve in curves.itertuples():
            group = sweep[sweep["model"] == curve.model].sort_values("tau", ascending=False)
            block, with_ar = int(curve.block_size), curve.sft_loss == "yes"
            (line,) = ax.plot(
                group[f"tpf_{task}"],
                group[task],
                marker="o" if with_ar else "x",
                linestyle="-" if with_ar else "--",
                label=f"B={block}" + ("" if with_ar else " w/o L_AR"),
            )
            colours[curve.model] = line.get_color()
        for model, group in lossless.groupby("model", sort=True):
            group = group.sort_values("tau", ascending=False)
            first = group.iloc[0]
            ax.plot(
                group[f"tpf_{task}"],
                group[task],
                marker="*",
                markersize=9,
                linestyle="none",
                color=colours.get(model),
                label=f"B={int(first.block_size)}" + ("" if first.sft_loss == "yes" else " w/o L_AR") + " lossless",
            )
        if not ar.empty:
            ax.axhline(float(ar[task].iloc[0]), color="black", linewidth=1, linestyle=":", label="AR SFT (5 ep)")
        ax.set_xlabel("tokens per forward")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(label)
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))  # outside: no curve hidden
    return save(fig, Path(stem))
