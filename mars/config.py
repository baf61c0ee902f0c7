"""Experiment configuration: one YAML file, validated by ``mars/schemas/config.schema.json``.

``config.yaml`` at the repository root is the tiny default; ``configs/`` holds the smoke and paper-scale configs.
A training entry is the ``training`` defaults overlaid with one ``models.<name>`` entry (:func:`train_spec`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).parent / "schemas" / "config.schema.json"
METHODS = ("lm", "ar", "mars", "block_diffusion")


class ConfigError(ValueError):
    """A bad configuration, command-line flag, checkpoint or data set: reported as one line, exit code 2."""


@dataclass(frozen=True)
class TrainSpec:
    method: str  # lm (plain LM pre-training of the tiny base) | ar (SFT) | mars | block_diffusion
    init: str  # "world" or the name of another model entry (resolved to a folder by the caller)
    split: str = "train"  # the data file trained on: <data>/<split>.jsonl (tiny base: "pretrain")
    attention: str = "mars"  # mars | bidirectional: attention inside the noisy block (method mars)
    block_size: int = 4
    w_ar: float = 1.0
    epochs: float = 5.0
    learning_rate: float = 5e-6
    lr_scheduler: str = "cosine"
    warmup_ratio: float = 0.03
    weight_decay: float = 0.0
    batch_size: int = 8  # per device
    grad_accum: int = 1
    max_length: int = 512
    bf16: bool = False
    activation_checkpointing: bool = False
    sort_micro_batches: bool = False  # random optimizer steps, each split into length-sorted micro-batches
    seed: int = 0
    max_steps: int = -1  # > 0 overrides epochs (smoke tests)
    save_steps: int = 100
    logging_steps: int = 10
    threads: int = 0  # torch intra-op threads; 0 = torch's default

    @property
    def variant(self) -> str:
        """The attention variant of the dual stream (masks.VARIANTS)."""
        return "block_diffusion" if self.method == "block_diffusion" else self.attention

    def to_dict(self) -> dict:
        return asdict(self)


def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def _error_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


def validate(config: dict) -> dict:
    """Raise ConfigError naming the offending key; fill nothing in (defaults live in TrainSpec)."""
    validator = jsonschema.Draft202012Validator(load_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        raise ConfigError(f"config key {_error_path(error)!r}: {error.message}")
    for name, entry in config.get("models", {}).items():
        init = entry.get("init", "world")
        if init != "world" and init not in config["models"]:
            raise ConfigError(f"config key 'models.{name}.init': {init!r} is neither 'world' nor a model entry")
        if init == name:
            raise ConfigError(f"config key 'models.{name}.init': a model cannot start from itself")
    return config


def load_config(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}".splitlines()[0]) from exc
    if not isinstance(config, dict):
        raise ConfigError(f"config file {path} must hold a mapping")
    return validate(config)


def train_spec(config: dict, model_name: str) -> TrainSpec:
    models = config.get("models", {})
    if model_name not in models:
        known = ", ".join(sorted(models)) or "none"
        raise ConfigError(f"unknown model {model_name!r}; the config defines: {known}")
    merged = {**config.get("training", {}), **models[model_name]}
    names = {f.name for f in fields(TrainSpec)}
    spec = TrainSpec(**{k: v for k, v in merged.items() if k in names})
    check_spec(spec, f"models.{model_name}")
    return spec


def check_spec(spec: TrainSpec, where: str = "spec") -> None:
    """Cross-field rules the schema cannot express neatly, each naming its key."""
    if spec.method not in METHODS:
        raise ConfigError(f"config key '{where}.method': unknown method {spec.method!r}; expected one of {METHODS}")
    if spec.attention not in ("mars", "bidirectional"):
        raise ConfigError(f"config key '{where}.attention': unknown attention variant {spec.attention!r}")
    if not isinstance(spec.block_size, int) or spec.block_size < 1:
        raise ConfigError(f"config key '{where}.block_size': must be an integer >= 1, got {spec.block_size!r}")
    if spec.method == "block_diffusion" and spec.w_ar:
        raise ConfigError(f"config key '{where}.w_ar': block diffusion has no AR loss; set it to 0")
    if spec.epochs <= 0 and spec.max_steps <= 0:
        raise ConfigError(f"config key '{where}.epochs': must be > 0")
