"""The ``mars`` command line: ``mars world | train | generate | bench | speculate | eval | report | mirror | prefetch |
import-smollm2 | text-loss | serve``.

Bad input (config, flags, checkpoints, data) prints one ``error:`` line and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from mars.pipeline.config import ConfigError


def _one_source(args, flags: tuple[str, ...]) -> None:
    """The settings of a job come either from --job (the pipeline) or from --config (by hand), never both."""
    given = [f"--{f.replace('_', '-')}" for f in flags if getattr(args, f, None)]
    if args.job and given:
        raise ConfigError(f"give either --job or {' and '.join(given)}, not both")
    if not args.job and len(given) < len(flags):
        raise ConfigError(f"give --job, or {' and '.join('--' + f.replace('_', '-') for f in flags)}")


def _world(args) -> None:
    from mars.pipeline.config import load_config, validate_section
    from mars.pipeline.jobs import parse_job

    _one_source(args, ("config",))
    world = validate_section("world", parse_job(args.job)) if args.job else load_config(args.config)["world"]
    if world["kind"] == "tiny":
        from mars.world.build import build_world

        summary = build_world(world, args.output)
    else:
        from mars.training.data import export_hf_sft

        summary = export_hf_sft(world, args.output)
    print(json.dumps(summary, indent=2))


def _tags(pairs: list[str]) -> dict:
    bad = [p for p in pairs if "=" not in p]
    if bad:
        raise ConfigError(f"--tag needs KEY=VALUE, got {bad[0]!r}")
    return dict(p.split("=", 1) for p in pairs)


def _train(args) -> None:
    from dataclasses import fields

    from mars.pipeline.config import DEFAULT_RESULTS_DIR, TrainSpec, check_spec, load_config
    from mars.pipeline.jobs import parse_job, train_job
    from mars.training.train import train

    _one_source(args, ("config", "model"))
    job = (
        parse_job(args.job, ("model", "spec", "mask_token", "experiment"))
        if args.job
        else train_job(load_config(args.config), args.model)
    )
    names = {f.name for f in fields(TrainSpec)}
    unknown = sorted(set(job.get("spec", {})) - names)
    if unknown or "spec" not in job or "model" not in job:
        raise ConfigError(f"--job needs 'model' and a 'spec' of TrainSpec fields (unknown: {unknown})")
    try:
        spec = TrainSpec(**job["spec"])
    except TypeError as exc:
        raise ConfigError(f"--job spec: {exc}") from None
    check_spec(spec, f"models.{job['model']}")
    metrics = train(
        spec,
        init=args.init,
        data_dir=args.data,
        output=args.output,
        experiment=job.get("experiment") or "default",
        run_name=job["model"],
        results_dir=args.results_dir or DEFAULT_RESULTS_DIR,
        mask_token=job.get("mask_token"),
        tags={"model": job["model"], **_tags(args.tag)},
        resume_from=args.resume_from,
    )
    print(json.dumps(metrics, indent=2, default=str))


def _distill(args) -> None:
    from mars.pipeline.jobs import parse_job
    from mars.training.distill import distill

    job = parse_job(args.job, ("split", "batch_size", "max_new_tokens", "threads")) if args.job else {}
    print(json.dumps(distill(args.model, args.data, args.output, **job), indent=2))


def _generate(args) -> None:
    from mars.checkpoints import checkpoint_folder, max_positions
    from mars.decoding.generation import (
        check_budget,
        check_decoding_args,
        decoding_window,
        encode_prompts,
        generate_text,
        load_model,
        load_tokenizer,
        render_chunks,
        to_json,
    )

    prompts = list(args.prompt)
    if args.prompts_file:
        from mars.training.data import load_records

        path = Path(args.prompts_file)
        prompts += [r["prompt"] for r in load_records(path.parent, path.stem)]
    if not prompts:
        raise ConfigError("no prompts: give --prompt TEXT or --prompts-file FILE.jsonl")
    checkpoint_folder(args.model)  # (before its window is looked up in its config.json)
    block_size = decoding_window(args.model, args.method, args.tau, args.block_size)
    check_decoding_args(args.method, args.cache, args.metric, args.tau, block_size, args.cache_block_size)
    if args.max_new_tokens < 1:
        raise ConfigError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    # every prompt with its budget fits in the model's positions: checked before the weights load
    ids = encode_prompts(load_tokenizer(args.model), prompts)
    check_budget(ids, args.max_new_tokens, max_positions(args.model), args.method, block_size)
    model, tokenizer = load_model(args.model)
    if args.threads:
        torch.set_num_threads(args.threads)
    outs = generate_text(
        model,
        tokenizer,
        prompts,
        batch_size=args.batch_size,
        progress=True,
        method=args.method,
        block_size=block_size,
        tau=args.tau,
        cache=args.cache,
        cache_block_size=args.cache_block_size,
        metric=args.metric,
        max_new_tokens=args.max_new_tokens,
        stop=args.stop,
    )
    if args.json:
        print(json.dumps(to_json(outs), indent=2))
        return
    color = args.show_chunks and sys.stdout.isatty()
    for out in outs:
        print(f"### {out.prompt}")
        print(render_chunks(out, color) if args.show_chunks else out.text)
        print(
            f"--- {len(out.token_ids)} tokens, {out.forwards} forwards, "
            f"{out.tokens_per_forward:.2f} tokens per forward\n"
        )


def _ints(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v]
    except ValueError as exc:
        raise ConfigError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or min(values) < 1:
        raise ConfigError(f"expected positive integers, got {text!r}")
    return values


def _listed(value, key: str):
    """A flag's value; the comma-separated list of names for --settings."""
    return [v for v in value.split(",") if v] if key == "settings" else value


BENCH_SETTINGS = (
    "batch_sizes",
    "cache_block_sizes",
    "num_prompts",
    "tau",
    "reps",
    "forward_reps",
    "max_new_tokens",
    "block_size",
    "threads",
    "experiment",
    "prompts",
    "harness_data",
    "dtype",
    "cpu_linear",
    "settings",
)


def _bench(args) -> None:
    from mars.bench.wallclock import run_bench
    from mars.pipeline.config import DEFAULT_RESULTS_DIR, check_bench_settings, schema_defaults, validate_flags
    from mars.pipeline.jobs import parse_job

    settings = {k: v for k, v in schema_defaults("bench").items() if k in BENCH_SETTINGS}
    settings["dtype"] = schema_defaults("eval")["dtype"]  # (evaluations and the benchmark load models alike)
    job = parse_job(args.job, BENCH_SETTINGS) if args.job else {}
    validate_flags("bench", job, job=True)
    settings.update(job)
    flags = {
        key: _ints(getattr(args, key)) if key.endswith("_sizes") else _listed(getattr(args, key), key)
        for key in BENCH_SETTINGS
        if getattr(args, key, None) is not None
    }
    validate_flags("bench", flags)  # (before the model is loaded: nothing runs on a bad flag)
    if flags.get("block_size", 1) < 1:
        raise ConfigError(f"--block-size must be >= 1, got {flags['block_size']}")
    settings.update(flags)
    check_bench_settings(settings["settings"], "--settings" if "settings" in flags else "--job key 'settings'")
    rows = run_bench(
        args.model,
        args.data,
        args.output,
        results_dir=args.results_dir or DEFAULT_RESULTS_DIR,
        **settings,
    )
    print(f"{'batch':>5} {'setting':16s} {'tok/s':>8} {'speed-up':>8} {'TPF':>5} {'efficiency':>10}")
    for r in rows:
        tpf = f"{r['tokens_per_forward']:.2f}" if r["tokens_per_forward"] else "  -"
        eff = f"{r['decode_efficiency']:.2f}" if r.get("decode_efficiency") else ""
        print(
            f"{r['batch_size']:5d} {r['setting']:16s} {r['tokens_per_s']:8.1f} {r['speedup_vs_ar_kv']:7.2f}x "
            f"{tpf:>5} {eff:>10}"
        )


SPECULATE_SETTINGS = (
    "k",
    "tau",
    "num_prompts",
    "max_new_tokens",
    "threads",
    "block_size",
    "metric",
    "dtype",
    "prompts",
    "harness_data",
    "models",
    "experiment",
)


def _speculate(args) -> None:
    from mars.bench.speculative import ROLES, run_speculate
    from mars.decoding.generation import default_window
    from mars.pipeline.config import DEFAULT_RESULTS_DIR, schema_defaults, validate_flags
    from mars.pipeline.jobs import parse_job

    # the section's defaults (its model names are not among them: the checkpoints are flags), and the evaluations'
    # acceptance metric and dtype
    settings = schema_defaults("speculative")
    settings.update(metric=schema_defaults("eval")["metric"], dtype=schema_defaults("eval")["dtype"])
    job = parse_job(args.job, SPECULATE_SETTINGS) if args.job else {}
    validate_flags("speculative", job, job=True)
    settings.update(job)
    flags = {
        key: getattr(args, key)
        for key in ("k", "tau", "num_prompts", "max_new_tokens", "threads", "block_size")
        if getattr(args, key, None) is not None
    }
    validate_flags("speculative", flags)
    settings.update(flags)
    paths = {role: getattr(args, role) for role in ROLES}
    if not settings.get("block_size"):
        settings["block_size"] = default_window(paths["target_mars"], "mars") or 0
        if settings["block_size"] < 2:
            raise ConfigError(
                f"{paths['target_mars']}: not a MARS checkpoint (no trained block size); give --block-size"
            )
    rows = run_speculate(paths, args.data, args.output, results_dir=args.results_dir or DEFAULT_RESULTS_DIR, **settings)
    print(f"{'row':17s} {'acc':>6} {'change':>7} {'tok/s':>8} {'speed-up':>8} {'tok/target fwd':>14}")
    for r in rows:
        print(
            f"{r['row']:17s} {r['accuracy']:6.1f} {r['accuracy_change_vs_target_tau1']:+7.1f} "
            f"{r['tokens_per_s']:8.1f} {r['speedup_vs_ar_ar']:7.2f}x {r['tokens_per_target_forward']:14.2f}"
        )


def _log_report(experiment: str, results_dir: str, name: str, paths: list) -> None:
    """Tables and figures are MLflow artifacts of one run per report item, in the config's experiment."""
    from mars.pipeline.tracking import mlflow_run

    with mlflow_run(
        experiment, f"report-{name}", results_dir=results_dir, tags={"kind": "report", "rule": "report", "item": name}
    ) as ml:
        for path in paths:
            ml.log_artifact(str(path))


FIGURES = {
    "fig1": "mars.report.fig1",
    "fig3": "mars.report.fig3",
    "fig6": "mars.report.fig6",
    "wallclock": "mars.report.fig_wallclock",
    "scaling": "mars.report.fig_scaling",  # (the scaling study: scaling.csv)
    "heldout": "mars.report.fig_scaling",  # (the scaling study: scaling.csv and the results folder)
    "curve": "mars.report.fig_curve",  # (the learning curve: curve.csv)
}


def _report(args) -> None:
    from mars.pipeline.config import DEFAULT_RESULTS_DIR, load_config
    from mars.pipeline.experiments import STUDY_TABLE
    from mars.pipeline.jobs import parse_job, study_job, table_job

    _one_source(args, ("config", "name"))
    results_dir = args.results_dir or DEFAULT_RESULTS_DIR
    if args.what == "table":
        from mars.report.tables import make_table

        if args.job:
            job = parse_job(
                args.job,
                ("table", "rows", "paper_model_size", "experiment", "models")
                + ("points", "taus", "metric", "replicates", "methods"),  # (the scaling study's table)
            )
        else:
            config = load_config(args.config)
            results_dir = args.results_dir or config["results_dir"]
            job = study_job(config) if args.name == STUDY_TABLE else table_job(config, args.name)
        frame = make_table(
            job, args.results, args.output, inputs=args.inputs or None, bench_csv=args.bench, text_losses=args.text_loss
        )
        print(frame.round(2).to_string(index=False))
        out = Path(args.output)
        _log_report(
            job["experiment"], results_dir, job["table"], [out, out.with_suffix(".md"), out.with_suffix(".tex")]
        )
        return
    job = (
        parse_job(args.job, ("figure", "experiment"))
        if args.job
        else {"figure": args.name, "experiment": load_config(args.config)["name"]}
    )
    name = job.get("figure")
    if name not in FIGURES:
        raise ConfigError(f"unknown figure {name!r}; expected one of {', '.join(FIGURES)}")
    import importlib

    module = importlib.import_module(FIGURES[name])
    needed = {"fig1": 2, "fig3": 2, "wallclock": 1, "scaling": 1, "heldout": 2, "curve": 1}.get(name)
    if needed and len(args.inputs) != needed:
        raise ConfigError(f"figure {name} takes {needed} --inputs, got {len(args.inputs)}")
    missing = [p for p in args.inputs if not Path(p).exists()]
    if missing:
        raise ConfigError(f"input not found: {missing[0]}")
    if name == "fig6":
        paths = module.main(args.inputs, args.output)
    else:
        paths = getattr(module, name if name in ("scaling", "heldout") else "main")(*args.inputs, args.output)
    print("\n".join(str(p) for p in paths))
    _log_report(job["experiment"], results_dir, name, paths)


def build_parser() -> argparse.ArgumentParser:
    from mars.pipeline.config import schema_defaults

    parser = argparse.ArgumentParser(prog="mars", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    job_help = "the job's settings as a JSON object (what the pipeline passes), instead of --config"

    world = commands.add_parser(
        "world", help="build the world folder: tiny (data, tokenizer, initial model) or hf (SFT data)"
    )
    world.add_argument("--config", help="config file whose world section to build")
    world.add_argument("--job", help="the world section as JSON")
    world.add_argument("--output", required=True, help="folder to create")
    world.set_defaults(run=_world)

    train = commands.add_parser("train", help="train one model entry of the config")
    train.add_argument("--config", help="config file (with --model)")
    train.add_argument("--model", help="name of the entry under 'models'")
    train.add_argument("--job", help=job_help)
    train.add_argument("--init", required=True, help="starting checkpoint folder (or hub id)")
    train.add_argument("--data", required=True, help="folder with <split>.jsonl (the entry's split; default train)")
    train.add_argument("--output", required=True, help="checkpoint folder to create")
    train.add_argument(
        "--resume-from",
        help="the folder of the entry's resume_from model (default: beside --output, named as the entry says)",
    )
    train.add_argument("--results-dir", help="folder of the MLflow store (default: the schema's results_dir)")
    train.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE", help="extra MLflow tag")
    train.set_defaults(run=_train)

    distill = commands.add_parser(
        "distill", help="self-distilled targets: each record's answer replaced by a model's own greedy answer"
    )
    distill.add_argument("--model", required=True, help="the model that answers (an entry's init)")
    distill.add_argument("--data", required=True, help="folder with <split>.jsonl (and heldout.jsonl, copied)")
    distill.add_argument("--output", required=True, help="data folder to create")
    distill.add_argument("--job", help="JSON: split, batch_size, max_new_tokens, threads (the workflow's)")
    distill.set_defaults(run=_distill)

    ev = schema_defaults("eval")  # decoding defaults: the config schema's, one place
    gen = commands.add_parser("generate", help="decode prompts with AR, MARS, Jacobi or block-diffusion decoding")
    gen.add_argument("--model", required=True, help="checkpoint folder")
    gen.add_argument("--prompt", action="append", default=[], help="a user message (repeatable)")
    gen.add_argument("--prompts-file", help="JSONL file with a 'prompt' per line (e.g. a world's test.jsonl)")
    gen.add_argument("--method", default="mars", help="ar | mars | mars_lossless | jacobi | block_diffusion")
    gen.add_argument("--block-size", type=int, help="window size B (default: the trained one)")
    gen.add_argument("--tau", type=float, default=1.0, help="acceptance threshold in (0, 1]; 1.0 = one token")
    gen.add_argument(
        "--cache",
        default=ev["cache"],
        help="none | block | cursor | authors_block (the authors' block cache: the whole block is the window)",
    )
    gen.add_argument("--cache-block-size", type=int, default=ev["cache_block_size"])
    gen.add_argument("--metric", default=ev["metric"], help="probability | entropy | margin")
    gen.add_argument("--max-new-tokens", type=int, default=ev["max_gen_toks"])
    gen.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    gen.add_argument("--batch-size", type=int, default=ev["batch_size"])
    gen.add_argument("--threads", type=int, default=0)
    gen.add_argument("--show-chunks", action="store_true", help="group the tokens of each forward pass")
    gen.add_argument("--json", action="store_true", help="print the results as JSON")
    gen.set_defaults(run=_generate)

    bench = commands.add_parser(
        "bench",
        help="wall-clock benchmark (Table 5): AR vs MARS caches vs prompt lookup; "
        "unset settings take the config schema's bench defaults",
    )
    bench.add_argument("--model", required=True, help="MARS checkpoint folder")
    bench.add_argument("--data", help="prompts 'world': folder with test.jsonl (its GSM8K-like prompts are used)")
    bench.add_argument("--output", required=True, help="folder for bench.csv and bench.json")
    bench.add_argument("--job", help="the bench settings as a JSON object (what the pipeline passes)")
    bench.add_argument("--batch-sizes", help="comma-separated")
    bench.add_argument("--cache-block-sizes", help="comma-separated")
    bench.add_argument("--num-prompts", type=int)
    bench.add_argument("--tau", type=float)
    bench.add_argument("--block-size", type=int, help="default: the trained block size")
    bench.add_argument("--reps", type=int)
    bench.add_argument("--forward-reps", type=int, help="timed forward pairs of the decode-efficiency ideal")
    bench.add_argument("--max-new-tokens", type=int)
    bench.add_argument("--threads", type=int, help="torch threads (they decide the measurement; schema default)")
    bench.add_argument("--prompts", help="world (--data's test.jsonl) | gsm8k (the harness's GSM8K test questions)")
    bench.add_argument("--harness-data", help="prompts gsm8k: local mirror of the harness's data (default: the hub)")
    bench.add_argument("--dtype", help="auto (bf16 on CUDA, fp32 on CPU) | bfloat16 | float16 | float32")
    bench.add_argument("--cpu-linear", help="default | onednn_packed: every decoder's linear kernel on a CPU")
    bench.add_argument(
        "--settings",
        help="comma-separated decoders to time (default: all; ar_hf_kv and mars_cursor must be among them)",
    )
    bench.add_argument("--results-dir", help="folder of the MLflow store")
    bench.set_defaults(run=_bench)

    spec = commands.add_parser(
        "speculate",
        help="speculative decoding (Table 6): AR / MARS drafts with AR / MARS targets, and lossless self-speculative "
        "MARS, batch 1; unset settings take the config schema's speculative defaults",
    )
    spec.add_argument("--target-ar", required=True, help="AR target checkpoint folder")
    spec.add_argument("--target-mars", required=True, help="MARS target checkpoint folder")
    spec.add_argument("--draft-ar", required=True, help="AR draft checkpoint folder (a smaller model, same tokenizer)")
    spec.add_argument("--draft-mars", required=True, help="MARS draft checkpoint folder (the target's block size)")
    spec.add_argument("--data", help="prompts 'world': folder with test.jsonl (its GSM8K-like prompts are used)")
    spec.add_argument("--output", required=True, help="folder for spec.csv and spec.json")
    spec.add_argument("--job", help="the settings as a JSON object (what the pipeline passes)")
    spec.add_argument("--k", type=int, help="drafts per target forward")
    spec.add_argument("--tau", type=float)
    spec.add_argument("--num-prompts", type=int)
    spec.add_argument("--max-new-tokens", type=int)
    spec.add_argument("--threads", type=int, help="torch threads (they decide the measurement)")
    spec.add_argument("--block-size", type=int, help="default: the MARS target's trained block size")
    spec.add_argument("--results-dir", help="folder of the MLflow store")
    spec.set_defaults(run=_speculate)

    report = commands.add_parser("report", help="regenerate a table or figure from pipeline outputs")
    report.add_argument("what", choices=["table", "figure"])
    report.add_argument("--name", help="table2..table9, ablations, cost | fig1, fig3, fig6, wallclock (with --config)")
    report.add_argument("--config", help="config file (with --name)")
    report.add_argument("--job", help=job_help)
    report.add_argument("--results", help="results/<name> folder (tables)")
    report.add_argument("--bench", help="bench.csv (table5), spec.csv (table6)")
    report.add_argument("--inputs", nargs="*", default=[], help="input files (evaluation JSONs, benchmark TSVs)")
    report.add_argument("--text-loss", nargs="*", default=[], help="real_model: `mars text-loss` records, <model>.json")
    report.add_argument("--output", required=True, help="table CSV path, or figure path stem")
    report.add_argument("--results-dir", help="folder of the MLflow store")
    report.set_defaults(run=_report)

    from mars.evaluation.evaluate import add_eval_arguments, run_eval_command

    evaluate = commands.add_parser("eval", help="benchmark a checkpoint with lm-eval through MARS decoding")
    add_eval_arguments(evaluate)
    evaluate.set_defaults(run=run_eval_command)

    from mars.pipeline import mirror, offline  # offline stand-ins (mars mirror) and the offline cache (mars prefetch)

    mirror.add_parser(commands)
    offline.add_parser(commands)

    from mars import smollm2  # a real model from its PyPI wheel (mars import-smollm2)

    smollm2.add_parser(commands)

    from mars.evaluation import text_loss  # real text nobody here wrote (mars text-loss)

    text_loss.add_parser(commands)

    from mars.serving import server  # the OpenAI-compatible endpoint (mars serve)

    server.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if getattr(args, "output", None):  # every command's output: writable, checked before any work
            from mars.fileio import check_writable

            check_writable(args.output)
        args.run(args)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # (mars train saves a checkpoint on the first Ctrl-C and says so: Preempted)
        print(f"mars {args.command}: interrupted; outputs are written whole or not at all", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
