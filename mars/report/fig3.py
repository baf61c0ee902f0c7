"""Figure 3: accuracy vs tokens per forward over the tau sweep (Pareto curves), per block size, with and without
L_AR, on the GSM8K- and HumanEval-like tasks, with AR SFT (tau = 1.0, one token per forward) as a reference line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mars.report.plotting import plt, save, setup


def main(table8_csv: str, table2_csv: str, stem: str) -> list[Path]:
    setup()
    sweep = pd.read_csv(table8_csv)
    reference = pd.read_csv(table2_csv)
    ar = reference[reference["row"] == "AR SFT (5 ep)"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4), sharey=False)
    for ax, task, label in ((axes[0], "gsm8k", "GSM8K-like"), (axes[1], "humaneval", "HumanEval-like")):
        # legend order: with L_AR before without, then by block size (4, 8, 16; not the string order 16, 4, 8)
        # (block size and SFT loss are Table 8's columns, read from the checkpoints' run configs)
        curves = sweep.drop_duplicates("model").sort_values(["sft_loss", "block_size"], ascending=[False, True])
        for curve in curves.itertuples():
            group = sweep[sweep["model"] == curve.model].sort_values("tau", ascending=False)
            block, with_ar = int(curve.block_size), curve.sft_loss == "yes"
            ax.plot(
                group[f"tpf_{task}"],
                group[task],
                marker="o" if with_ar else "x",
                linestyle="-" if with_ar else "--",
                label=f"B={block}" + ("" if with_ar else " w/o L_AR"),
            )
        if not ar.empty:
            ax.axhline(float(ar[task].iloc[0]), color="black", linewidth=1, linestyle=":", label="AR SFT (5 ep)")
        ax.set_xlabel("tokens per forward")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(label)
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))  # outside: no curve hidden
    return save(fig, Path(stem))
