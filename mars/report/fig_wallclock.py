"""Wall-clock figure (Table 5): decoding speed-up over AR with KV cache, per setting and batch size."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mars.report.plotting import plt, save, setup, sns


def main(bench_csv: str, stem: str) -> list[Path]:
    setup()
    bench = pd.read_csv(bench_csv)
    fig, ax = plt.subplots(figsize=(8, 3.4))
    order = list(dict.fromkeys(bench.setting))
    sns.barplot(data=bench, x="setting", y="speedup_vs_ar_kv", hue="batch_size", order=order, ax=ax)
    ax.axhline(1.0, color="black", linewidth=1)
    ax.set_ylabel("speed-up over AR (KV cache)")
    ax.set_xlabel("")
    ax.tick_params(axis="x", rotation=30, labelsize=7)
    ax.legend(title="batch", fontsize=7)
    return save(fig, Path(stem))
