"""Figure 1: one generation with the tokens of each forward pass shaded as a group.

Reads one evaluation result (a MARS model at tau < 1) and draws the sample with the most tokens per forward among
those that scored correct (any sample if none did): each forward's tokens share a background colour.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from mars.report.plotting import plt, save, setup


def pick_sample(record: dict) -> dict:
    samples = [s for s in record["samples"] if s.get("token_ids") and s.get("chunks")]
    if not samples:
        raise ValueError("the evaluation result has no per-sample chunks")
    correct = [s for s in samples if any(v == 1 or v is True for v in (s.get("metrics") or {}).values())]
    pool = correct or samples
    return max(pool, key=lambda s: (s["tokens_per_forward"] or 0, -len(s["token_ids"]), str(s["id"])))


def chunk_texts(sample: dict, tokenizer) -> list[str]:
    pieces, at = [], 0
    for n in sample["chunks"]:
        pieces.append(tokenizer.decode(sample["token_ids"][at : at + n], skip_special_tokens=True))
        at += n
    return pieces


def draw(pieces: list[str], title: str, stem: Path, width_chars: int = 70) -> list[Path]:
    setup()
    colors = ["#cfe3f6", "#fbe3b5"]
    lines, line, length = [], [], 0
    for index, piece in enumerate(pieces):  # greedy line wrapping over whole chunks (long chunks split)
        for part in textwrap.wrap(piece, width_chars, drop_whitespace=False) or [piece]:
            if length + len(part) > width_chars and line:
                lines.append(line)
                line, length = [], 0
            line.append((part.replace("\n", " "), index))
            length += len(part)
    if line:
        lines.append(line)
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(lines) + 0.8))
    ax.axis("off")
    renderer = fig.canvas.get_renderer()
    line_h = 1.0 / max(len(lines), 1)
    for row, parts in enumerate(lines):
        x = 0.0
        for text, index in parts:  # each chunk placed right after the previous one, measured as rendered
            artist = ax.text(
                x,
                1 - (row + 0.5) * line_h,
                text,
                family="monospace",
                fontsize=8,
                va="center",
                ha="left",
                bbox={"facecolor": colors[index % 2], "edgecolor": "none", "pad": 1.2},
            )
            x += artist.get_window_extent(renderer=renderer).width / ax.get_window_extent(renderer=renderer).width
    ax.set_title(title, fontsize=9)
    return save(fig, stem)


def main(eval_json: str, model_dir: str, stem: str) -> list[Path]:
    from transformers import AutoTokenizer

    record = json.loads(Path(eval_json).read_text())
    sample = pick_sample(record)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    pieces = chunk_texts(sample, tokenizer)
    title = (
        f"{record['model']['name']}, tau={record['tau']:g}: {len(sample['token_ids'])} tokens in "
        f"{sample['forwards']} forwards ({sample['tokens_per_forward']:.2f} tokens per forward)"
    )
    return draw(pieces, title, Path(stem))
