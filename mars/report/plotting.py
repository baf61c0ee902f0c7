"""Shared figure settings: deterministic output (fixed style, no timestamps in the PDF/PNG metadata)."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

from mars.fileio import write_bytes_atomic

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402


def setup() -> None:
    sns.set_theme(style="whitegrid", context="paper")
    plt.rcParams.update({"figure.dpi": 150, "savefig.dpi": 150, "svg.hashsalt": "mars", "pdf.fonttype": 42})


def save(fig, stem: str | Path) -> list[Path]:
    """``stem``.png and ``stem``.pdf, with metadata that does not change between runs."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = []
    for suffix, metadata in (
        (".png", {"Software": None}),
        (".pdf", {"CreationDate": None, "Producer": None, "Creator": None}),
    ):
        path = stem.with_suffix(suffix)
        buffer = io.BytesIO()
        fig.savefig(buffer, format=suffix[1:], bbox_inches="tight", metadata=metadata)
        write_bytes_atomic(path, buffer.getvalue())
        paths.append(path)
    plt.close(fig)
    return paths
