"""Checkpoint folders, read and checked before any work: where a checkpoint is (a local folder or a hub id), what a
broken one says (one line), how many positions its model has and which block size it was trained with. Used alike
by training (``mars train --init``), decoding, evaluation, the benchmarks and serving."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from mars.pipeline.config import ConfigError


# What a truncated or corrupt checkpoint raises while loading (safetensors' own error included): one error line.
def _load_errors() -> tuple[type[BaseException], ...]:
    from safetensors import SafetensorError

    return (OSError, ValueError, RuntimeError, EnvironmentError, SafetensorError)


def checkpoint_folder(path: str | Path) -> Path:
    """``path`` as a local checkpoint folder (one with a config.json), or ConfigError."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ConfigError(f"model checkpoint not found (no config.json): {path}")
    return path


HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def check_checkpoint(model: str | os.PathLike, flag: str = "--model") -> Path:
    """A local checkpoint folder (returned absolute), or a hub id such as ``Qwen/Qwen2.5-0.5B-Instruct`` (returned
    as given: ``from_pretrained`` loads it, from the local hub cache when offline). A missing path is a local-path
    error, never a hub lookup: a name is taken for a hub id only when it has the hub's ``owner/name`` form and its
    first part is not a local folder."""
    path = Path(model).expanduser()
    if path.exists():
        if not path.is_dir() or not (path / "config.json").is_file():
            raise ConfigError(f"{flag} {model}: not a checkpoint folder (no config.json)")
        return path.resolve()
    text = str(model)
    if not HUB_ID.match(text) or Path(text.split("/")[0]).is_dir():
        raise ConfigError(f"{flag} {model}: no such checkpoint folder")
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE and not isinstance(try_to_load_from_cache(text, "config.json"), str):
        raise ConfigError(f"{flag} {model}: neither a folder nor a hub model in the local cache (offline)")
    return Path(text)


def checkpoint_error(path, exc: BaseException) -> str:
    """One line naming the checkpoint and what is wrong with it."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return f"cannot load checkpoint {path}: {type(exc).__name__}: {text}"


def max_positions(path: str | Path) -> int | None:
    """The positions a checkpoint's model has (its config.json's ``max_position_embeddings``); None where it names
    none."""
    config_file = Path(path) / "config.json"
    try:
        positions = json.loads(config_file.read_text()).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return int(positions) if positions else None


def check_fits(what: str, size: int, positions: int | None) -> None:
    """ConfigError when ``size`` positions (a window, a prompt and its budget) exceed the model's ``positions``."""
    if positions and size > positions:
        raise ConfigError(f"{what} exceeds the model's {positions} positions (max_position_embeddings)")


def trained_block_size(path: str | Path) -> int | None:
    """The block size a MARS or block-diffusion checkpoint was trained with, so that it is decoded with the same
    window: its config.json's ``mars.block_size`` (written by mars.training.trainer.MARSTrainer), else (checkpoints
    from before that field) its run_config.json; None for any other checkpoint."""
    config_file = Path(path) / "config.json"
    if config_file.is_file():
        try:
            decoding = json.loads(config_file.read_text()).get("mars") or {}
        except ValueError:
            raise ConfigError(f"{config_file} is not valid JSON") from None
        if decoding.get("block_size"):
            block_size = int(decoding["block_size"])
            check_fits(f"{config_file}: mars.block_size {block_size}", block_size, max_positions(path))
            return block_size
    run_config = Path(path) / "run_config.json"
    if not run_config.is_file():
        return None
    try:
        spec = json.loads(run_config.read_text()).get("spec") or {}
    except ValueError:
        raise ConfigError(f"{run_config} is not valid JSON") from None
    if spec.get("method") not in ("mars", "block_diffusion"):
        return None
    block_size = int(spec["block_size"])
    check_fits(f"{run_config}: block_size {block_size}", block_size, max_positions(path))
    return block_size
