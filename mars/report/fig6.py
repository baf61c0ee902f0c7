"""Figure 6: acceptance metrics compared: accuracy vs tokens per forward for probability, entropy and margin
confidence over the same thresholds, one MARS model, GSM8K- and HumanEval-like tasks."""

from __future__ import annotations

from pathlib import Path

from mars.report.collect import collect_evals
from mars.report.plotting import plt, save, setup


def main(eval_files: list[str], stem: str) -> list[Path]:
    setup()
    frame = collect_evals(eval_files)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, family in zip(axes, ("gsm8k", "humaneval")):
        part = frame[frame.family == family]
        for metric, group in part.groupby("acceptance", sort=True):
            group = group.sort_values("tau", ascending=False)
            ax.plot(group.tokens_per_forward, group.score, marker="o", label=metric)
            for r in group.itertuples():
                ax.annotate(f"{r.tau:g}", (r.tokens_per_forward, r.score), fontsize=6, alpha=0.7)
        ax.set_xlabel("tokens per forward")
        ax.set_ylabel("accuracy (%)")
        ax.set_title(f"{family}-like")
    axes[1].legend(title="confidence", fontsize=7)
    return save(fig, Path(stem))
