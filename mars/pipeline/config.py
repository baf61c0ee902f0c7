"""Experiment configuration: one YAML file, validated by ``mars/schemas/config.schema.json``.

``config.yaml`` at the repository root is the tiny default; ``configs/`` holds the smoke and paper-scale configs.
A training entry is the ``training`` defaults overlaid with one ``models.<name>`` entry (:func:`train_spec`).

Every default lives in the schema (``"default"``): :func:`validate` fills them in, and the command-line flags and
:class:`TrainSpec` read theirs from there (:func:`schema_defaults`).
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import asdict, dataclass, fields
from functools import cache
from pathlib import Path

import jsonschema
import yaml

SCHEMA_PATH = Path(__file__).parents[1] / "schemas" / "config.schema.json"
METHODS = ("lm", "ar", "mars", "block_diffusion")


class ConfigError(ValueError):
    """A bad configuration, command-line flag, checkpoint or data set: reported as one line, exit code 2."""


@cache
def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


def _scalar(value, types) -> object:
    """A string that Snakemake's ``--config`` left unparsed (it reads nested values as plain strings: ``--config
    bench={reps: 2}`` gives ``"2"``), as the non-string scalar the schema asks for; anything else unchanged."""
    types = [types] if isinstance(types, str) else list(types or [])
    if not isinstance(value, str) or not types or "string" in types:
        return value
    parsed = yaml.safe_load(value) if value.strip() else value
    wanted = {"integer": int, "number": (int, float), "boolean": bool, "null": type(None)}
    if any(
        isinstance(parsed, wanted[t]) and not (t != "boolean" and isinstance(parsed, bool))
        for t in types
        if t in wanted
    ):
        return parsed
    return value


def _filling_validator():
    """A validator that sets each missing property that has a schema ``default`` before validating it, and turns
    the strings of a ``--config`` override into the scalars the schema asks for."""
    base = jsonschema.Draft202012Validator
    check_properties = base.VALIDATORS["properties"]

    def properties(validator, props, instance, schema):
        if isinstance(instance, dict):
            for name, sub in props.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
                if name in instance:
                    instance[name] = _scalar(instance[name], sub.get("type"))
                    if isinstance(instance[name], list) and isinstance(sub.get("items"), dict):
                        instance[name] = [_scalar(v, sub["items"].get("type")) for v in instance[name]]
        yield from check_properties(validator, props, instance, schema)

    return jsonschema.validators.extend(base, {"properties": properties})


def schema_defaults(section: str) -> dict:
    """The defaults of one top-level section ("training", "eval", "bench", "report"), as filled in by validate."""
    props = load_schema()["properties"][section].get("properties", {})
    return {name: copy.deepcopy(sub["default"]) for name, sub in props.items() if "default" in sub}


def validate_section(section: str, value: dict) -> dict:
    """Fill in and check one top-level section alone (e.g. a ``world`` dict given to ``build_world``)."""
    schema = load_schema()
    value = copy.deepcopy(value)
    error = jsonschema.exceptions.best_match(
        _filling_validator()({**schema["properties"][section], "$defs": schema["$defs"]}).iter_errors(value)
    )
    if error is not None:
        raise ConfigError(f"config key {'.'.join([section, *map(str, error.absolute_path)])!r}: {error.message}")
    return value


def validate_flags(section: str, values: dict, job: bool = False) -> None:
    """Command-line flags that set keys of a config section (``mars bench --reps``), or the keys of a ``--job``
    (``job=True``), are checked by the same schema as the config, each reported as one line naming its flag or key."""
    schema = load_schema()
    props = schema["properties"][section].get("properties", {})
    for key, value in values.items():
        if key not in props or value is None:
            continue
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator({**props[key], "$defs": schema["$defs"]}).iter_errors(value)
        )
        if error is not None:
            raise ConfigError(
                f"--job key {key!r}: {error.message}" if job else f"--{key.replace('_', '-')}: {error.message}"
            )


def check_bench_settings(settings, where: str) -> None:
    """The benchmark's decoders (``bench.settings``, ``mars bench --settings``) must include the reference of every
    speed-up (ar_hf_kv) and the decoder of the decode efficiency (mars_cursor); ``where`` names the key or flag."""
    needed = {"ar_hf_kv": "the reference of every speed-up", "mars_cursor": "the decoder of the decode efficiency"}
    for name, why in needed.items():
        if name not in settings:
            raise ConfigError(f"{where}: must include {name} ({why})")


DEFAULT_RESULTS_DIR = load_schema()["properties"]["results_dir"]["default"]


def _default(name: str):
    return schema_defaults("training")[name]


@dataclass(frozen=True)
class TrainSpec:
    """One model's training settings: the ``training`` section overlaid with its ``models.<name>`` entry. The
    defaults are the schema's (``training`` section)."""

    method: str  # lm (plain LM pre-training of the tiny base) | ar (SFT) | mars | block_diffusion
    init: str  # "world" or the name of another model entry (resolved to a folder by the caller)
    split: str = _default("split")  # the data file trained on: <data>/<split>.jsonl (tiny base: "pretrain")
    attention: str = _default("attention")  # mars | bidirectional: attention inside the noisy block (method mars)
    block_size: int = _default("block_size")
    w_ar: float = _default("w_ar")
    epochs: float = _default("epochs")
    learning_rate: float = _default("learning_rate")
    lr_scheduler: str = _default("lr_scheduler")
    warmup_ratio: float = _default("warmup_ratio")
    weight_decay: float = _default("weight_decay")
    batch_size: int = _default("batch_size")  # per device
    grad_accum: int | None = _default("grad_accum")  # None: derived from effective_batch (else 1)
    effective_batch: int | None = _default("effective_batch")  # examples per optimizer step, all processes together
    max_length: int = _default("max_length")
    bf16: bool = _default("bf16")
    activation_checkpointing: bool = _default("activation_checkpointing")
    sort_micro_batches: bool = _default("sort_micro_batches")  # random steps, each in length-sorted micro-batches
    # The authors' recipe (docs/method.md section 7): which turns carry loss, the dual-stream loss normalisation,
    # EOS padding to a multiple of the block size, and the masked stream's weighting (their no-SFT ablation).
    loss_turns: str = _default("loss_turns")  # all | last
    loss_normalization: str = _default("loss_normalization")  # token | sequence (dual-stream methods)
    pad_to_block: str = _default("pad_to_block")  # none | eos (dual-stream methods)
    mask_loss_weighting: str = _default("mask_loss_weighting")  # uniform | inverse_t (method mars)
    seed: int = _default("seed")
    max_steps: int = _default("max_steps")  # > 0 overrides epochs (smoke tests)
    save_steps: int = _default("save_steps")
    logging_steps: int = _default("logging_steps")
    eval_steps: int | None = _default("eval_steps")  # held-out next-token loss every n steps (with heldout.jsonl)
    threads: int = _default("threads")  # torch intra-op threads; 0 = torch's default
    kernels: str = _default("kernels")  # native | reproducible: CPU kernels chosen per CPU or pinned (mars/repro.py)
    accelerate_config: str | None = _default(
        "accelerate_config"
    )  # the workflow's multi-GPU launch (configs/accelerate)
    processes: int | None = _default("processes")  # None: one per GPU of the job (the workflow's launch)
    # init world only: a fresh random model of the world's architecture with these Qwen2 keys changed (tiny world)
    architecture: dict | None = _default("architecture")
    base_model: str | None = _default("base_model")  # init world only: this start instead of world.base_model (hf)
    layers: int | None = _default("layers")  # the init's first n decoder layers only (a smaller draft, Table 6)
    # a learning curve's chain of jobs (configs/smollm2-curve.yaml): stop after this step of the schedule and keep the
    # Trainer checkpoint; go on from another entry's kept checkpoint
    stop_at_step: int | None = _default("stop_at_step")
    resume_from: str | None = _default("resume_from")
    targets: str = _default("targets")  # gold | self_greedy: the init model's own greedy answers (rule distill)

    @property
    def variant(self) -> str:
        """The attention variant of the dual stream (masks.VARIANTS)."""
        return "block_diffusion" if self.method == "block_diffusion" else self.attention

    def to_dict(self) -> dict:
        return asdict(self)


def _error_path(error: jsonschema.ValidationError) -> str:
    return ".".join(str(p) for p in error.absolute_path) or "<top level>"


def validate(config: dict) -> dict:
    """Fill in the schema's defaults (in place) and check the config; ConfigError naming the offending key."""
    validator = _filling_validator()(load_schema())
    error = jsonschema.exceptions.best_match(validator.iter_errors(config))
    if error is not None:
        raise ConfigError(f"config key {_error_path(error)!r}: {error.message}")
    for name, entry in config.get("models", {}).items():
        init = entry["init"]
        if init != "world" and init not in config["models"]:
            raise ConfigError(f"config key 'models.{name}.init': {init!r} is neither 'world' nor a model entry")
        if init == name:
            raise ConfigError(f"config key 'models.{name}.init': a model cannot start from itself")
        _check_start(config, name, entry)
    _check_init_cycles(config.get("models", {}))
    # a model's own keys: never a default of every entry
    for key in ("architecture", "base_model", "layers", "derived_from"):
        if config.get("training", {}).get(key) is not None:
            raise ConfigError(f"config key 'training.{key}': set it on the model entry that starts that way")
    check_bench_settings(config["bench"]["settings"], "config key 'bench.settings'")
    if config["eval"]["real_tasks"] and config["eval"]["profile"] != "tiny":
        raise ConfigError(
            "config key 'eval.real_tasks': only for the tiny profile (the paper profile already runs the harness's "
            "own tasks)"
        )
    expand_seeds(config)
    expand_study(config)
    return config


def _check_init_cycles(models: dict) -> None:
    """Every chain of starts (``models.<name>.init``) ends at 'world': a cycle (a base started from a model that
    descends from it, two entries naming each other) is one line naming its models, in the order they start from
    each other."""
    for name in models:
        chain = [name]
        while models[chain[-1]]["init"] != "world":
            init = models[chain[-1]]["init"]
            if init in chain:
                cycle = chain[chain.index(init) :] + [init]
                raise ConfigError(
                    f"config key 'models.{cycle[0]}.init': the starts form a cycle, {' -> '.join(cycle)} (each "
                    "starts from the next): one of them must start from 'world' or a model outside the cycle"
                )
            chain.append(init)


MULTI_TOKEN_KEYS = ("block_size", "w_ar", "attention")


def _add_derived(config: dict, name: str, entry: dict, key: str) -> None:
    """Add one derived model entry (idempotent: a config validated twice derives the same entries again)."""
    models = config["models"]
    if name in models and "derived_from" not in models[name]:
        raise ConfigError(f"config key '{key}': it derives model {name!r}, which the config already defines")
    models[name] = entry


def replicate_name(model: str, seed: int) -> str:
    return f"{model}_seed{seed}"


def expand_seeds(config: dict) -> None:
    """Section ``seeds``: each listed model trained again with every extra seed (``<model>_seed<s>``), from the
    same-seed run of its init when that is listed too (so AR SFT seed s -> MARS seed s: paired differences)."""
    seeds = config.get("seeds") or {}
    models = config["models"]
    for model in seeds.get("models", []):
        if model not in models or "derived_from" in models[model]:
            raise ConfigError(f"config key 'seeds.models': {model!r} is not a model entry")
        own = train_spec(config, model).seed
        if own in seeds.get("extra", []):
            raise ConfigError(f"config key 'seeds.extra': {own} is already {model!r}'s own training seed")
    for seed in seeds.get("extra", []):
        for model in seeds.get("models", []):
            entry = {k: v for k, v in models[model].items() if k != "derived_from"}
            if entry["init"] in seeds["models"]:
                entry["init"] = replicate_name(entry["init"], seed)
            entry.update(seed=seed, derived_from={"kind": "seed", "model": model, "seed": seed})
            _add_derived(config, replicate_name(model, seed), entry, "seeds")


STUDY_ROLES = ("base", "ar", "mars", "nolar", "cont")


def study_name(point: str, role: str) -> str:
    return f"study_{point}_{role}"


def continuation_entry(config: dict, ar: str, mars: str) -> dict:
    """The AR continuation of ``ar``: the MARS model's entry (epochs, learning rate, data...) with the AR objective."""
    entry = {k: v for k, v in config["models"][mars].items() if k not in (*MULTI_TOKEN_KEYS, "derived_from")}
    return {**entry, "method": "ar", "init": ar}


def study_default_point(config: dict) -> dict[str, str]:
    """{role: model} of the study's default point: the report's base, AR SFT, MARS and MARS w/o L_AR, and the AR
    continuation (``report.rows.ar_continuation``, else the study's own ``study_default_cont``)."""
    rows = config["report"]["rows"]
    return {
        "base": config["report"]["base_model"],
        "ar": rows["ar_sft"],
        "mars": rows["mars"],
        "nolar": rows["mars_no_sft_loss"],
        "cont": rows.get("ar_continuation") or study_name("default", "cont"),
    }


def expand_study(config: dict) -> None:
    """Section ``study``: per point (``default``; each of ``sizes``; ``x<k>`` for each of ``sft_scales``) the models
    base -> AR SFT -> MARS with / without L_AR and the AR continuation, named ``study_<point>_<role>``; the default
    point is the config's own models (and its ``report.rows.ar_continuation`` if set)."""
    study = config.get("study")
    if not study:
        return
    models = config["models"]
    rows = config["report"]["rows"]
    roles = {r: m for r, m in study_default_point(config).items() if r != "cont"}
    methods = {"base": "lm", "ar": "ar", "mars": "mars", "nolar": "mars"}
    if any(roles[r] not in models or models[roles[r]]["method"] != methods[r] for r in roles if r != "base"):
        return  # check_model_references names the report key that names no (or the wrong kind of) model entry
    base = models.get(roles["base"])
    if base is None or base["init"] != "world" or models[roles["ar"]]["init"] != roles["base"]:
        raise ConfigError("config key 'study': needs report.base_model (init world) -> report.rows.ar_sft")
    for role in ("mars", "nolar"):
        if models[roles[role]]["init"] != roles["ar"]:
            raise ConfigError(f"config key 'study': {roles[role]!r} must start from {roles['ar']!r}")
    if rows.get("ar_continuation") is None:
        _add_derived(
            config,
            study_name("default", "cont"),
            {
                **continuation_entry(config, roles["ar"], roles["mars"]),
                "derived_from": {"kind": "study", "point": "default", "role": "cont"},
            },
            "study",
        )

    def point(name: str, base_change: dict, data_change: dict) -> None:
        names = {role: study_name(name, role) for role in STUDY_ROLES}
        base = roles["base"] if not base_change else names["base"]
        entries = {
            "ar": {**models[roles["ar"]], **data_change, "init": base},
            "mars": {**models[roles["mars"]], **data_change, "init": names["ar"]},
            "nolar": {**models[roles["nolar"]], **data_change, "init": names["ar"]},
        }
        if base_change:
            entries["base"] = {**models[roles["base"]], **base_change}
        entries["cont"] = {**continuation_entry(config, names["ar"], roles["mars"]), **data_change}
        for role, entry in entries.items():
            entry = {k: v for k, v in entry.items() if k != "derived_from"}
            _add_derived(
                config, names[role], {**entry, "derived_from": {"kind": "study", "point": name, "role": role}}, "study"
            )

    if 1.0 not in [float(t) for t in study["taus"]]:
        raise ConfigError("config key 'study.taus': must hold 1.0 (the table compares every model at tau 1.0)")
    for name in study["sizes"]:
        if name == "default" or re.fullmatch(r"x\d+", name):
            raise ConfigError(
                f"config key 'study.sizes.{name}': the name of a size point cannot be 'default' or x<k> (the "
                "names of the default point and of the SFT-set points)"
            )
    if study["sizes"] and config["world"]["kind"] != "tiny":
        raise ConfigError("config key 'study.sizes': only a tiny world trains bases of other sizes")
    for name, change in study["sizes"].items():
        shape = {**config["world"].get("model", {}), **(models[roles["base"]].get("architecture") or {}), **change}
        if (
            shape["hidden_size"] % shape["num_attention_heads"]
            or shape["num_attention_heads"] % shape["num_key_value_heads"]
        ):
            raise ConfigError(
                f"config key 'study.sizes.{name}': hidden_size must be divisible by "
                "num_attention_heads, and num_key_value_heads must divide num_attention_heads"
            )
        point(name, {"architecture": {**(models[roles["base"]].get("architecture") or {}), **change}}, {})
    for scale in study["sft_scales"]:
        if scale not in config["world"].get("sft_scales", []):
            raise ConfigError(
                f"config key 'study.sft_scales': {scale} is not one of world.sft_scales (the world "
                "writes data/train_x<k>.jsonl for those)"
            )
        split = models[roles["ar"]].get("split", config["training"]["split"])
        point(f"x{scale}", {}, {"split": f"{split}_x{scale}"})


def _check_start(config: dict, name: str, entry: dict) -> None:
    """``architecture`` (a fresh model of another shape) belongs to an ``init: world`` entry of a tiny world,
    ``base_model`` (another hub start) to one of an hf world."""
    kind = config["world"]["kind"]
    for key, world_kind in (("architecture", "tiny"), ("base_model", "hf")):
        if entry.get(key) is None:
            continue
        if entry["init"] != "world":
            raise ConfigError(f"config key 'models.{name}.{key}': only a model with init 'world' starts from it")
        if kind != world_kind:
            raise ConfigError(f"config key 'models.{name}.{key}': only on a {world_kind} world (this one is {kind})")
    shape = {**config["world"].get("model", {}), **(entry.get("architecture") or {})}
    if entry.get("architecture") and shape["hidden_size"] % shape["num_attention_heads"]:
        raise ConfigError(
            f"config key 'models.{name}.architecture': hidden_size must be divisible by num_attention_heads"
        )
    if entry.get("architecture") and shape["num_attention_heads"] % shape["num_key_value_heads"]:
        raise ConfigError(
            f"config key 'models.{name}.architecture': num_key_value_heads must divide num_attention_heads"
        )


def check_model_references(config: dict) -> None:
    """Every model the tables, figures and benchmark name must be a model entry: a renamed or removed entry is one
    clear error, never a silently missing row. (Checked by the workflow, not by a single ``mars train``.)"""
    models = config["models"]
    refs = {
        "report.base_model": config["report"]["base_model"],
        "eval.metric_model": config["eval"]["metric_model"],
        "eval.figure1.model": config["eval"]["figure1"]["model"],
        "bench.model": config["bench"]["model"],
        **{f"report.rows.{role}": name for role, name in config["report"]["rows"].items() if name is not None},
        **{f"eval.sweep_models[{i}]": name for i, name in enumerate(config["eval"]["sweep_models"] or [])},
        **{f"eval.lossless_models[{i}]": name for i, name in enumerate(config["eval"]["lossless_models"] or [])},
    }
    for key, name in refs.items():
        if name not in models and not (key == "report.base_model" and name == "world"):
            known = ", ".join(sorted(models))
            raise ConfigError(f"config key {key!r}: {name!r} is not a model entry (the config has: {known})")
    # the models decoded by the MARS window at several taus (the sweep, Figure 6, the benchmark) must be MARS models
    window = {
        "eval.metric_model": config["eval"]["metric_model"],
        "bench.model": config["bench"]["model"],
        **{k: v for k, v in refs.items() if k.startswith(("eval.sweep_models", "eval.lossless_models"))},
    }
    for key, name in window.items():
        if models[name]["method"] != "mars":
            raise ConfigError(f"config key {key!r}: {name!r} is a {models[name]['method']!r} model, not a MARS model")
    for role, method in (
        *((("ar_continuation", "ar"),) if config["report"]["rows"]["ar_continuation"] else ()),
        ("ar_sft", "ar"),
        ("ar_sft_long", "ar"),
        ("mars", "mars"),
        ("mars_no_sft_loss", "mars"),
        ("block_diffusion", "block_diffusion"),
    ):
        name = config["report"]["rows"][role]
        if name is not None and models[name]["method"] != method:
            raise ConfigError(
                f"config key 'report.rows.{role}': {name!r} is a {models[name]['method']!r} model, not {method!r}"
            )
    check_speculative_models(config)
    check_chains_and_curve(config)


def check_chains_and_curve(config: dict) -> None:
    """A ``resume_from`` entry goes on from an entry with ``stop_at_step`` of the same method, start and data (the
    rest ``mars train`` checks against the checkpoint); a ``targets: self_greedy`` entry is a fine-tuning (it needs
    an init model to answer); the ``curve`` section names entries of the right kinds. One error line each."""
    models = config["models"]
    for name, entry in models.items():
        parent = entry.get("resume_from")
        if parent is not None:
            if parent not in models:
                raise ConfigError(f"config key 'models.{name}.resume_from': {parent!r} is not a model entry")
            if models[parent].get("stop_at_step") is None:
                raise ConfigError(f"config key 'models.{name}.resume_from': {parent!r} has no stop_at_step")
            for key in ("method", "init", "split", "targets", "epochs", "max_steps"):  # (one schedule)
                if models[parent].get(key) != entry.get(key):
                    raise ConfigError(
                        f"config key 'models.{name}.resume_from': {parent!r} has another {key} "
                        f"({models[parent].get(key)!r}, not {entry.get(key)!r})"
                    )
        stop, steps = entry.get("stop_at_step"), entry.get("max_steps")
        if stop is not None and steps is not None and steps > 0 and stop >= steps:
            raise ConfigError(
                f"config key 'models.{name}.stop_at_step': {stop}, but its schedule ends at step {steps} (max_steps)"
            )
        if entry.get("targets", "gold") != "gold" and (entry["init"] == "world" or entry["method"] == "lm"):
            raise ConfigError(f"config key 'models.{name}.targets': self_greedy needs an init model that answers")
    curve = config.get("curve")
    if not curve:
        return
    named = {"curve.start": curve["start"], "curve.ar_continuation": curve.get("ar_continuation")}
    named.update({f"curve.models[{i}]": m for i, m in enumerate(curve["models"])})
    named.update({f"curve.self_distilled[{i}]": m for i, m in enumerate(curve.get("self_distilled", []))})
    for key, name in named.items():
        if name is None:
            continue
        if name not in models:
            raise ConfigError(f"config key {key!r}: {name!r} is not a model entry")
        want = "ar" if key in ("curve.start", "curve.ar_continuation") else "mars"
        if models[name]["method"] != want:
            raise ConfigError(f"config key {key!r}: {name!r} is a {models[name]['method']!r} model, not {want!r}")
        if key.startswith("curve.self_distilled") and models[name].get("targets") != "self_greedy":
            raise ConfigError(f"config key {key!r}: {name!r} does not train on targets: self_greedy")


SPECULATIVE_ROLES = (("target_ar", "ar"), ("target_mars", "mars"), ("draft_ar", "ar"), ("draft_mars", "mars"))


def check_speculative_models(config: dict) -> None:
    """Table 6's models (section ``speculative``): model entries of the right method; the MARS draft and target share
    the block size (speculative decoding runs one window)."""
    spec = config.get("speculative")
    if not spec:
        return
    models = config["models"]
    for role, method in SPECULATIVE_ROLES:
        name = spec[role]
        if name not in models:
            known = ", ".join(sorted(models))
            raise ConfigError(
                f"config key 'speculative.{role}': {name!r} is not a model entry (the config has: {known})"
            )
        if models[name]["method"] != method:
            raise ConfigError(
                f"config key 'speculative.{role}': {name!r} is a {models[name]['method']!r} model, not {method!r}"
            )
    blocks = {role: train_spec(config, spec[role]).block_size for role in ("target_mars", "draft_mars")}
    if blocks["target_mars"] != blocks["draft_mars"]:
        raise ConfigError(
            f"config key 'speculative.draft_mars': block size {blocks['draft_mars']} differs from the MARS target's "
            f"{blocks['target_mars']} (speculative decoding runs one window)"
        )


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
    if spec.method in ("mars", "block_diffusion") and not 2 <= spec.block_size < spec.max_length:
        raise ConfigError(
            f"config key '{where}.block_size': {spec.block_size}, but a dual-stream method needs 2 <= block_size < "
            f"max_length ({spec.max_length}): B = 1 has no mask to train, and a block must leave room for a prompt"
        )
    if spec.method == "block_diffusion" and spec.w_ar:
        raise ConfigError(f"config key '{where}.w_ar': block diffusion has no AR loss; set it to 0")
    if spec.method == "block_diffusion" and spec.mask_loss_weighting != "uniform":
        raise ConfigError(
            f"config key '{where}.mask_loss_weighting': block diffusion weights each block by its own 1/t already"
        )
    if (spec.architecture or spec.base_model) and spec.init != "world":
        key = "architecture" if spec.architecture else "base_model"
        raise ConfigError(f"config key '{where}.{key}': only a model with init 'world' starts from it")
    if spec.layers is not None and spec.architecture:
        raise ConfigError(f"config key '{where}.layers': a fresh architecture sets its own num_hidden_layers")
    if spec.epochs <= 0 and spec.max_steps <= 0:
        raise ConfigError(f"config key '{where}.epochs': must be > 0")
    for name in ("grad_accum", "effective_batch"):
        value = getattr(spec, name)
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ConfigError(f"config key '{where}.{name}': must be an integer >= 1 or null, got {value!r}")


def resolve_grad_accum(spec: TrainSpec, processes: int, where: str = "spec") -> int:
    """Micro-batches per optimizer step such that batch_size x grad_accum x processes == effective_batch.

    ``processes`` is the number of data-parallel copies of the model at run time
    (:func:`mars.training.train.processes`). Without ``effective_batch``, ``grad_accum`` (default 1) as given; with it,
    ``grad_accum`` is derived, or checked where the config gives both.
    """
    if spec.effective_batch is None:
        return spec.grad_accum or 1
    per_micro_step = spec.batch_size * processes
    if spec.effective_batch % per_micro_step:
        raise ConfigError(
            f"config key '{where}.effective_batch': {spec.effective_batch} is not a multiple of batch_size x "
            f"processes = {spec.batch_size} x {processes} = {per_micro_step}"
        )
    derived = spec.effective_batch // per_micro_step
    if spec.grad_accum is not None and spec.grad_accum != derived:
        raise ConfigError(
            f"config key '{where}.grad_accum': {spec.grad_accum}, but effective_batch {spec.effective_batch} with "
            f"batch_size {spec.batch_size} on {processes} processes needs {derived}: drop one of the two keys"
        )
    return derived
