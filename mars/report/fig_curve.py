"""The learning curve in one figure, from ``curve.csv`` (docs/smollm2_curve.md): against the example passes of
training (log axis), tokens per forward at the fast tau (MARS, its lossless decoding on the GSM8K-like family, the
self-distilled arms; the paper's value as a dotted line) and accuracy at tau 1.0 and at the fast tau (the start's
tau-1.0 accuracy as a line, the AR continuation as a point)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mars.report.plotting import plt, save, setup


def main(curve_csv: str, stem: str) -> list[Path]:
    setup()
    table = pd.read_csv(curve_csv)
    mars = table[table.role == "mars"].sort_values("example_passes")
    distilled = table[table.role == "self_distilled"]
    start = table[table.role == "start"]
    continuation = table[table.role == "ar_continuation"]
    tau = mars["tau"].iloc[0]
    fig, (speed, accuracy) = plt.subplots(1, 2, figsize=(9, 3.4))

    speed.plot(mars.example_passes, mars.tpf_fast, marker="o", label=f"MARS, tau {tau:g} (six families)")
    speed.plot(mars.example_passes, mars.lossless_tpf_gsm8k, marker="s", linestyle="--", label="lossless, GSM8K-like")
    if len(distilled):
        speed.scatter(distilled.example_passes, distilled.tpf_fast, marker="*", s=90, color="C2", zorder=3)
        speed.scatter([], [], marker="*", s=90, color="C2", label=f"self-distilled, tau {tau:g}")
    paper = table.paper_tpf_fast.dropna()
    if len(paper):
        speed.axhline(paper.iloc[0], color="grey", linestyle=":", label=f"paper (0.5B, tau {tau:g}): {paper.iloc[0]:g}")
    speed.axhline(1.0, color="black", linewidth=1)
    speed.set_ylabel("tokens per forward")

    accuracy.plot(mars.example_passes, mars.avg_tau1, marker="o", label="MARS, tau 1.0")
    accuracy.plot(mars.example_passes, mars.avg_fast, marker="o", linestyle="--", label=f"MARS, tau {tau:g}")
    if len(distilled):
        accuracy.scatter(distilled.example_passes, distilled.avg_tau1, marker="*", s=90, color="C2", zorder=3)
        accuracy.scatter([], [], marker="*", s=90, color="C2", label="self-distilled, tau 1.0")
    if len(start):
        accuracy.axhline(start.avg_tau1.iloc[0], color="black", linewidth=1, label=f"{start.model.iloc[0]} (start)")
    if len(continuation):
        accuracy.scatter(continuation.example_passes, continuation.avg_tau1, marker="s", color="C3", zorder=3)
        accuracy.scatter([], [], marker="s", color="C3", label="AR continuation")
    accuracy.set_ylabel("average accuracy, six families (%)")

    budgets = sorted(table.example_passes.dropna().unique())
    for ax in (speed, accuracy):
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [f"{b:,.0f}" for b in budgets])  # the budgets themselves, not powers of 2
        ax.minorticks_off()
        ax.set_xlabel("example passes of MARS training")
        ax.legend(fontsize=7)
    return save(fig, Path(stem))
