"""The README's "MARS on your own model" block, run as written on a small model: only the model and its mask token
are swapped (the tiny world's AR SFT checkpoint, whose tokenizer has a chat template and a <|mask|> token)."""

import re
from pathlib import Path

import torch

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_block() -> str:
    text = README.read_text()
    section = text.split("## MARS on your own model", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_block_trains_and_decodes_several_tokens_per_forward(trained_tiny, tmp_path, monkeypatch, capsys):
    code = readme_block()
    assert len(code.strip().splitlines()) <= 15
    line = 'MODEL, MASK = "Qwen/Qwen2.5-0.5B-Instruct", "<|fim_pad|>"'
    assert line in code
    code = code.replace(line, f'MODEL, MASK = {str(trained_tiny["ar"])!r}, "<|mask|>"')
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    printed = capsys.readouterr().out
    tpf = float(re.search(r"\(([0-9.]+) tokens per forward\)", printed).group(1))
    assert tpf > 1.0, printed
    # the saved checkpoint says how it must be decoded
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tmp_path / "mars-out")
    assert config.mars["block_size"] == 4 and config.mask_token_id is not None
    # the final model alone (no checkpoint-N/ with optimizer state beside it), with a card naming its real start
    saved = sorted(p.name for p in (tmp_path / "mars-out").iterdir())
    assert not [name for name in saved if name.startswith("checkpoint-")], saved
    card = (tmp_path / "mars-out" / "README.md").read_text()
    assert f"A fine-tuned version of `{trained_tiny['ar']}`" in card and "block size B = 4" in card
