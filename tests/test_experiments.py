"""The one declaration of the experiments: rows follow the config's model entries by their properties (block size,
w_AR, attention), never by their names; a removed model that a table names is one clear error."""

import re
from pathlib import Path

import pytest
import yaml

from mars.pipeline import experiments as X
from mars.pipeline import jobs as J
from mars.pipeline.config import ConfigError, check_model_references, validate

ROOT = Path(__file__).resolve().parent.parent


def config(name="config.yaml", edit=None) -> dict:
    raw = yaml.safe_load((ROOT / name).read_text())
    if edit:
        edit(raw)
    config = validate(raw)
    check_model_references(config)
    return config


def labels(cfg, table):
    return [row.label for row in X.table_rows(cfg, table)]


def test_default_rows_are_the_papers():
    cfg = config()
    assert labels(cfg, "table2") == [
        "Base",
        "AR SFT (5 ep)",
        "AR SFT (10 ep)",
        "Block Diffusion (B=4)",
        "MARS w/o SFT loss (B=4)",
        "MARS (B=4)",
    ]
    assert [(r.keys["sft_loss"], r.keys["block_size"]) for r in X.table_rows(cfg, "table3")] == [
        ("no", 4),
        ("no", 8),
        ("no", 16),
        ("yes", 4),
        ("yes", 8),
        ("yes", 16),
    ]
    table4 = X.table_rows(cfg, "table4")
    assert [(r.setting.model, r.setting.tau, r.reference.tau) for r in table4] == [
        ("mars_b4", 0.95, 1.0),
        ("mars_b8", 0.95, 1.0),
        ("mars_b16", 0.95, 1.0),
    ]
    assert [(r.label, r.setting.model, r.reference.model) for r in X.table_rows(cfg, "ablations")] == [
        ("no L_AR", "mars_nolar_b4", "mars_b4"),
        ("no L_AR", "mars_nolar_b8", "mars_b8"),
        ("no L_AR", "mars_nolar_b16", "mars_b16"),
        ("bidirectional block", "mars_bidir_b4", "mars_b4"),
        ("block diffusion", "block_diffusion_b4", "mars_b4"),
        ("10-epoch AR", "ar_sft_10ep", "ar_sft_5ep"),
        ("MARS vs its AR start", "mars_b4", "ar_sft_5ep"),
        ("AR continuation", "ar_sft_5ep_cont", "ar_sft_5ep"),
        ("MARS vs the AR continuation", "mars_b4", "ar_sft_5ep_cont"),
    ]
    table9 = X.table_rows(cfg, "table9")
    assert [(r.label, r.setting.method, r.setting.tau) for r in table9] == [
        ("Jacobi decoding", "jacobi", 1.0),
        ("MARS (tau=0.95)", "mars", 0.95),
    ]


def test_rows_follow_properties_not_names():
    """Renamed entries (with the references that name them updated) give the same rows under the new names."""

    def rename(c):
        c["models"]["big_window"] = c["models"].pop("mars_b16")
        c["models"]["plain_b8"] = c["models"].pop("mars_nolar_b8")
        c["eval"]["sweep_models"] = None  # every causal-block MARS model

    cfg = config(edit=rename)
    table3 = {(r.keys["sft_loss"], r.keys["block_size"]): r.setting.model for r in X.table_rows(cfg, "table3")}
    assert table3[("yes", 16)] == "big_window" and table3[("no", 8)] == "plain_b8"
    assert ("no L_AR", "plain_b8", "mars_b8") in [
        (r.label, r.setting.model, r.reference.model) for r in X.table_rows(cfg, "ablations")
    ]
    assert "big_window" in X.sweep_models(cfg)


def test_an_added_model_adds_its_row_and_its_jobs():
    cfg = config(
        edit=lambda c: c["models"].update(
            mars_wide={"method": "mars", "init": "ar_sft_5ep", "block_size": 32, "w_ar": 1.0, "epochs": 5}
        )
    )
    assert ("yes", 32) in [(r.keys["sft_loss"], r.keys["block_size"]) for r in X.table_rows(cfg, "table3")]
    assert "MARS (B=32)" in labels(cfg, "table4")
    settings = X.all_settings(cfg)
    assert X.Setting("mars_wide", "mars", 0.95) in settings
    assert {s.tau for s in settings if s.model == "mars_wide" and s.kind == "sweep"} == set(cfg["eval"]["sweep_taus"])


@pytest.mark.parametrize(
    "key,edit",
    [
        ("report.rows.mars", lambda c: c["report"].update(rows={"mars": "mars_b4_new"})),
        ("seeds.models", lambda c: c["models"].update(mars_b4_new=c["models"].pop("mars_b4"))),
        (
            "eval.metric_model",
            lambda c: [c["models"].update(mars_b4_new=c["models"].pop("mars_b4")), c.pop("seeds")],
        ),
        ("eval.sweep_models[0]", lambda c: c["eval"].update(sweep_models=["nope"])),
        ("eval.sweep_models[1]", lambda c: c["eval"].update(sweep_models=["mars_b4", "ar_sft_5ep"])),
        ("eval.metric_model", lambda c: c["eval"].update(metric_model="block_diffusion_b4")),
        ("report.rows.mars", lambda c: c["report"].update(rows={"mars": "ar_sft_10ep"})),
    ],
)
def test_a_missing_model_is_one_clear_error(key, edit):
    with pytest.raises(ConfigError, match=re.escape(f"config key '{key}'")):
        config(edit=edit)


def test_table8_uses_the_configs_sweep_taus():
    cfg = config("configs/smoke.yaml", edit=lambda c: c["eval"].update(sweep_taus=[1.0, 0.8, 0.5]))
    rows = X.table_rows(cfg, "table8")
    assert {(r.setting.model, r.setting.tau) for r in rows} == {
        (m, t) for m in ("mars_b4", "mars_nolar_b4") for t in (1.0, 0.8, 0.5)
    }
    assert all(r.setting.kind == "sweep" for r in rows)


def test_eval_job_decodes_with_the_trained_block_size():
    cfg = config()
    assert J.eval_job(cfg, "mars_b16", "mars", 0.9, "probability", "eval")["block_size"] == 16
    assert J.eval_job(cfg, "block_diffusion_b4", "block_diffusion", 1.0, "probability", "eval")["block_size"] == 4
    assert J.eval_job(cfg, "ar_sft_5ep", "jacobi", 1.0, "probability", "eval")["block_size"] == 4
    assert J.eval_job(cfg, "ar_sft_5ep", "ar", 1.0, "probability", "eval")["block_size"] == 1
    with pytest.raises(ConfigError, match="not a MARS"):
        J.eval_job(cfg, "ar_sft_5ep", "mars", 0.9, "probability", "eval")


def test_defaults_live_in_the_schema():
    """A config that leaves a section out gets the schema's defaults; TrainSpec and the flags read the same."""
    from mars.pipeline.config import TrainSpec, schema_defaults

    cfg = config("configs/smoke.yaml", edit=lambda c: [c.pop("bench"), c["world"].pop("vocab_size")])
    assert cfg["bench"] == schema_defaults("bench")
    assert cfg["world"]["vocab_size"] == 1024  # the default world's (build.py no longer has its own 640)
    assert TrainSpec(method="ar", init="world").learning_rate == schema_defaults("training")["learning_rate"]
    from mars.cli import build_parser

    ev = schema_defaults("eval")
    args = build_parser().parse_args(["generate", "--model", "x", "--prompt", "p"])
    assert (args.cache, args.cache_block_size, args.metric, args.max_new_tokens) == (
        ev["cache"],
        ev["cache_block_size"],
        ev["metric"],
        ev["max_gen_toks"],
    )


def test_job_params_are_canonical():
    """The same settings give the same param text whatever the key order (so Snakemake sees no false change)."""
    assert J.as_param({"b": 1, "a": {"y": 2, "x": 1}}) == J.as_param({"a": {"x": 1, "y": 2}, "b": 1})
    assert J.parse_job(J.as_param({"a": 1})) == {"a": 1}
    with pytest.raises(ConfigError, match="not valid JSON"):
        J.parse_job("{a: 1}")
    with pytest.raises(ConfigError, match="unknown setting 'zz'"):
        J.parse_job('{"zz": 1}', allowed=("a",))


def test_command_line_overrides_arrive_typed():
    """Snakemake's --config reads nested values as strings ("bench={reps: 2}" gives "2"): validate turns them into
    the scalars the schema asks for, and still rejects what is not one."""
    cfg = config(
        "configs/smoke.yaml",
        edit=lambda c: c.update(
            bench={"reps": "2", "tau": "0.9"}, eval={"sweep_taus": ["1.0", "0.8"], "limit": "null"}
        ),
    )
    assert (cfg["bench"]["reps"], cfg["bench"]["tau"]) == (2, 0.9)
    assert cfg["eval"]["sweep_taus"] == [1.0, 0.8] and cfg["eval"]["limit"] is None
    with pytest.raises(ConfigError, match="config key 'bench.reps'"):
        config("configs/smoke.yaml", edit=lambda c: c.update(bench={"reps": "two"}))


def without_table6(raw: dict) -> None:
    """The config as it was before Table 6: no draft entries, no speculative section."""
    for name in [m for m in raw["models"] if m.startswith("draft_")]:
        raw["models"].pop(name)
    raw.pop("speculative", None)


@pytest.mark.parametrize("name", ["config.yaml", "configs/paper-7b.yaml", "configs/smollm2-135m.yaml"])
def test_the_draft_chain_changes_no_existing_job(name):
    """Adding Table 6 (the draft entries, the speculative section, the new train keys) reruns nothing that exists:
    every other model's train param, every evaluation, the benchmark and every other table's job are unchanged,
    and the drafts are rows of no block-size table."""
    new, old = config(name), config(name, edit=without_table6)
    drafts = X.draft_models(new)
    assert drafts == {m for m in new["models"] if m.startswith("draft_")} and len(drafts) >= 2
    for model in old["models"]:
        job = J.train_job(new, model)
        assert job == J.train_job(old, model), model
        if X.derived(old, model) is None:  # (the study's bases of other sizes start from an architecture)
            assert not {"architecture", "base_model", "layers"} & set(job["spec"])  # unset: out of the param
    assert X.all_settings(new) == X.all_settings(old)
    assert J.bench_job(new) == J.bench_job(old)
    for table in X.tables(old):
        assert J.table_job(new, table) == J.table_job(old, table), table
    assert set(X.tables(new)) - set(X.tables(old)) == {"table6"}
    # the drafts' own params carry their smaller start: a fresh architecture, another hub model, or a trained
    # model's first layers
    specs = [J.train_job(new, m)["spec"] for m in drafts]
    firsts = [s for s in specs if s["init"] == "world" or "layers" in s]
    assert firsts and all(("architecture" in s) + ("base_model" in s) + ("layers" in s) == 1 for s in firsts)


def test_table6_job_names_its_models_and_their_ancestors():
    cfg = config()
    assert X.speculative_models(cfg) == {
        "target_ar": "ar_sft_5ep",
        "target_mars": "mars_b4",
        "draft_ar": "draft_ar_sft_5ep",
        "draft_mars": "draft_mars_b4",
    }
    job = J.table_job(cfg, "table6")
    assert set(job["models"]) == {"base", "ar_sft_5ep", "mars_b4", "draft_base", "draft_ar_sft_5ep", "draft_mars_b4"}
    assert job["models"]["draft_mars_b4"]["trained"]["block_size"] == 4
    spec = J.speculate_job(cfg)
    assert spec["block_size"] == 4 and spec["prompts"] == "world" and spec["k"] == 4 and spec["tau"] == 0.95


def test_a_draft_that_a_target_starts_from_is_no_draft():
    """A draft that another model needs (here the AR SFT the MARS models start from) stays in every table."""
    cfg = config(edit=lambda c: c["speculative"].update(draft_ar="ar_sft_5ep"))
    # (draft_ar_sft_5ep is still the MARS draft's start: a draft)
    assert X.draft_models(cfg) == {"draft_mars_b4", "draft_ar_sft_5ep", "draft_base"}
    assert "ar_sft_5ep" not in X.draft_models(cfg) and "ar_sft_5ep" in X.table_models(cfg, "cost")


def test_seeds_expand_to_paired_runs_and_rows_carry_them():
    cfg = config()
    # every listed model again with each extra seed; MARS seed s starts from AR SFT seed s, AR SFT from the one base
    for seed in (1, 2):
        assert cfg["models"][f"mars_b4_seed{seed}"]["init"] == f"ar_sft_5ep_seed{seed}"
        assert cfg["models"][f"mars_nolar_b4_seed{seed}"]["init"] == f"ar_sft_5ep_seed{seed}"
        assert cfg["models"][f"ar_sft_5ep_seed{seed}"]["init"] == "base"
        assert J.train_job(cfg, f"mars_b4_seed{seed}")["spec"]["seed"] == seed
        # the run differs from the seed-0 model in its seed (and start) only
        a, b = J.train_job(cfg, "mars_b4")["spec"], J.train_job(cfg, f"mars_b4_seed{seed}")["spec"]
        assert {k for k in a if a[k] != b[k]} == {"seed", "init"}
    table2 = {r.setting.model: r for r in X.table_rows(cfg, "table2")}
    assert [s.model for s in table2["mars_b4"].replicates] == ["mars_b4_seed1", "mars_b4_seed2"]
    assert table2["base"].replicates == () and table2["block_diffusion_b4"].replicates == ()
    nolar = next(r for r in X.table_rows(cfg, "ablations") if r.setting.model == "mars_nolar_b4")
    assert [s.model for s in nolar.reference_replicates] == ["mars_b4_seed1", "mars_b4_seed2"]
    # replicates are evaluated (the default target) but are rows of no block-size table nor of the cost table
    evaluated = {s.model for s in X.all_settings(cfg)}
    assert {"ar_sft_10ep_seed1", "mars_nolar_b4_seed2"} <= evaluated
    assert not any("_seed" in r.setting.model for r in X.table_rows(cfg, "table3"))
    assert not any("_seed" in m or m.startswith("study_") for m in X.table_models(cfg, "cost"))
    # a row round-trips through the job param with its replicates
    row = table2["mars_b4"]
    assert X.Row.from_dict(row.to_dict()) == row
    # validating twice derives the same entries (the workflow and the report may both validate)
    assert validate(cfg)["models"] == cfg["models"]


def test_seed_errors_are_one_line():
    def clash(raw):
        raw["models"]["mars_b4_seed1"] = {"method": "ar", "init": "base"}

    with pytest.raises(ConfigError, match="derives model 'mars_b4_seed1'"):
        config(edit=clash)
    with pytest.raises(ConfigError, match="own training seed"):
        config(edit=lambda raw: raw["seeds"].update(extra=[0, 1]))
    with pytest.raises(ConfigError, match="'nope' is not a model entry"):
        config(edit=lambda raw: raw["seeds"].update(models=["nope"]))


def test_study_points_are_the_default_chain_at_other_sizes_and_data():
    cfg = config()
    points = {p["point"]: p for p in X.study_points(cfg)}
    assert list(points) == ["default", "h64", "h256", "x4", "x8"]
    assert points["default"]["models"] == {
        "base": "base",
        "ar": "ar_sft_5ep",
        "mars": "mars_b4",
        "nolar": "mars_nolar_b4",
        "cont": "ar_sft_5ep_cont",
    }
    models = cfg["models"]
    # a size point: its own base (same depth, other width), then the default chain's entries on top of it
    assert models["study_h64_base"]["architecture"]["hidden_size"] == 64
    assert X.train_spec(cfg, "study_h64_base").epochs == X.train_spec(cfg, "base").epochs
    assert [models[f"study_h64_{r}"]["init"] for r in ("ar", "mars", "nolar", "cont")] == [
        "study_h64_base",
        "study_h64_ar",
        "study_h64_ar",
        "study_h64_ar",
    ]
    # a data point: the default base, the larger SFT set for every stage
    assert models["study_x4_ar"]["init"] == "base"
    assert {X.train_spec(cfg, f"study_x4_{r}").split for r in ("ar", "mars", "nolar", "cont")} == {"train_x4"}
    # the AR continuation is the MARS entry with the AR objective: same epochs, learning rate, start
    cont, mars = X.train_spec(cfg, "study_x4_cont"), X.train_spec(cfg, "study_x4_mars")
    assert (cont.method, cont.init, cont.epochs, cont.learning_rate) == (
        "ar",
        "study_x4_ar",
        mars.epochs,
        mars.learning_rate,
    )
    # evaluations: MARS at every study tau, the others at 1.0; the default point's seeds too
    settings = {(s.model, s.tau) for s in X.study_settings(cfg)}
    assert {("study_h256_mars", 0.95), ("study_h256_mars", 1.0), ("study_h256_cont", 1.0)} <= settings
    assert ("study_h256_ar", 0.95) not in settings and ("mars_b4_seed2", 1.0) in settings
    # the study is no part of the default tables
    assert not any(s.model.startswith("study_") for s in X.all_settings(cfg))
    with pytest.raises(ConfigError, match="not one of world.sft_scales"):
        config(edit=lambda raw: raw["study"].update(sft_scales=[3]))
    with pytest.raises(ConfigError, match="must hold 1.0"):
        config(edit=lambda raw: raw["study"].update(taus=[0.95]))
    for name in ("x4", "default"):  # a size point may not take the name of the SFT-set or the default point
        with pytest.raises(ConfigError, match=f"study.sizes.{name}'"):
            config(edit=lambda raw, name=name: raw["study"]["sizes"].update({name: {"hidden_size": 64}}))


def test_smollm2_config_starts_from_the_imported_model_and_drops_the_rows_it_does_not_train():
    from mars.pipeline.config import load_config

    config = load_config(ROOT / "configs" / "smollm2-135m.yaml")
    assert config["world"]["start"] == "smollm2-135m-instruct"
    rows = [r.label for r in X.table_rows(config, "table2")]
    assert rows == ["Base", "AR SFT (5 ep)", "MARS w/o SFT loss (B=4)", "MARS (B=4)"]
    assert [r.setting.model for r in X.table_rows(config, "table2")][0] == "world"
    ablations = [r.label for r in X.table_rows(config, "ablations")]
    assert (
        "10-epoch AR" not in ablations and "AR continuation" in ablations and "MARS vs the AR continuation" in ablations
    )


def test_real_tasks_run_the_paper_profile_on_the_workflows_own_humaneval_mirror():
    cfg = validate(yaml.safe_load((ROOT / "configs" / "smollm2-135m.yaml").read_text()))
    assert X.tables(cfg)[-1] == X.REAL_TABLE
    job = J.eval_job(cfg, "mars_b4", "mars", 0.95, "probability", "real")
    assert (job["profile"], job["tasks"], job["block_size"]) == ("paper", "humaneval", 4)
    assert job["harness_data"] == "results/smollm2-135m/harness"
    # the six families of the same model stay the tiny profile's, and their jobs do not name the mirror
    tiny = J.eval_job(cfg, "mars_b4", "mars", 0.95, "probability", "eval")
    assert tiny["profile"] == "tiny" and "harness_data" not in tiny
    real = [s for s in X.all_settings(cfg) if s.kind == "real"]
    assert [(s.model, s.tau) for s in real] == [
        ("world", 1.0),
        ("ar_sft", 1.0),
        ("ar_sft_cont", 1.0),
        ("mars_nolar_b4", 1.0),
        ("mars_b4", 1.0),
        ("mars_b4", 0.95),
    ]
    smoke = validate(yaml.safe_load((ROOT / "configs" / "smoke.yaml").read_text()))
    assert X.REAL_TABLE not in X.tables(smoke) and X.text_loss_models(smoke) == []
    paper = yaml.safe_load((ROOT / "configs" / "paper-0.5b.yaml").read_text())
    paper["eval"]["real_tasks"] = ["humaneval"]
    with pytest.raises(ConfigError, match="eval.real_tasks': only for the tiny profile"):
        validate(paper)


def test_the_bench_kernel_enters_the_bench_param_only_when_set():
    """``bench.cpu_linear`` was added after benches had run: at its default it stays out of the job (no finished
    bench reruns); set, it is the job's setting."""
    default = config("configs/smoke.yaml")
    assert default["bench"]["cpu_linear"] == "default" and "cpu_linear" not in J.bench_job(default)
    packed = config("configs/smoke.yaml", edit=lambda c: c["bench"].update(cpu_linear="onednn_packed"))
    assert J.bench_job(packed) == {**J.bench_job(default), "cpu_linear": "onednn_packed"}
    assert J.bench_job(config("configs/smollm2-135m.yaml"))["cpu_linear"] == "onednn_packed"


def test_the_bench_settings_enter_the_bench_param_only_when_set_and_must_keep_the_reference():
    """``bench.settings`` was added after benches had run: at its default (every decoder) it stays out of the job."""
    default = config("configs/smoke.yaml")
    assert "settings" not in J.bench_job(default)
    picked = ["ar_hf_kv", "mars_block", "mars_cursor"]
    chosen = config("configs/smoke.yaml", edit=lambda c: c["bench"].update(settings=picked))
    assert J.bench_job(chosen) == {**J.bench_job(default), "settings": picked}
    with pytest.raises(ConfigError, match=r"^config key 'bench.settings': must include mars_cursor \("):
        config("configs/smoke.yaml", edit=lambda c: c["bench"].update(settings=["ar_hf_kv", "mars_tau1"]))
