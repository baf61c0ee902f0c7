"""The paper's tables, regenerated from the pipeline's outputs, with the paper's own numbers beside them.

    mars report table --config config.yaml --name table2 --results results/tiny --inputs EVAL.json ... \\
        --output results/tables/table2.csv

writes ``table2.csv`` plus ``table2.md`` (Markdown) and ``table2.tex`` (LaTeX, booktabs) next to it. The rows are
the job's (``mars.pipeline.jobs.table_job``, from the one declaration of every table); a declared row without its
evaluation, or a model whose checkpoint was trained differently than the config says, is an error, never a silently
missing or stale row. Scores are percentages; ``tpf`` = tokens per forward; each row carries the decoding settings
its numbers came from (method, tau, block size, cache, generation budget).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from mars.fileio import write_text_atomic
from mars.pipeline.config import ConfigError
from mars.pipeline.experiments import FAMILIES, RECIPE_KEYS, Row, Setting
from mars.report.collect import collect_evals, read_benchmark, read_json, training_cost
from mars.report.stats import _mean, _std, difference, item_paired_se, t_halfwidth, verdict

PAPER = Path(__file__).parent / "paper_reference"
DECODING_COLUMNS = ("method", "tau", "block_size", "acceptance", "cache", "max_gen_toks", "limit")


class Tables:
    def __init__(
        self,
        job: dict,
        results: str | Path | None,
        inputs: list | None = None,
        bench_csv: str | Path | None = None,
        text_losses: list | None = None,
    ):
        self.job = job
        # model -> its `mars text-loss` record (the real-model table; files are named <model>.json)
        self.text_losses = {Path(p).stem: read_json(Path(p)) for p in text_losses or []}
        self.results = Path(results) if results else None
        self.rows = [Row.from_dict(r) for r in job["rows"]]
        self.inputs = list(inputs or [])
        self.evals = collect_evals(self.inputs) if self.rows else None
        self.bench_csv = bench_csv
        if self.results is not None:
            self.check_checkpoints()

    # -- checks and lookups ---------------------------------------------------------------------------------
    def check_checkpoints(self) -> None:
        """Each trained model's checkpoint must have been trained as the config now says (else it is stale)."""
        for model, info in self.job["models"].items():
            if info["init"] is None:  # the hub checkpoint ("world")
                continue
            spec = read_json(self.results / "models" / model / "run_config.json").get("spec", {})
            trained = info["trained"]
            for key in ("block_size", "w_ar", "attention", *RECIPE_KEYS):
                if trained[key] is not None and spec.get(key) != trained[key]:
                    raise ConfigError(
                        f"checkpoint {model} was trained with {key}={spec.get(key)!r} but the config "
                        f"says {trained[key]!r}: rerun its training"
                    )

    def found(self, setting: Setting) -> dict:
        """{family: result row} of one evaluation setting; every family it declares must be there."""
        rows = self.evals[
            (self.evals.model == setting.model)
            & (self.evals.setting == setting.name)
            & (self.evals.kind == setting.kind)
        ]
        found = {r.family: r for r in rows.itertuples()}
        missing = [f for f in setting.families if f not in found]
        if missing:
            raise ConfigError(
                f"no {setting.kind} result for {setting.model} {setting.name} {missing[0]} among the --inputs"
            )
        return found

    def scores(self, setting: Setting, *, tpf: bool = False) -> dict:
        found = self.found(setting)
        out = {f: found[f].score for f in setting.families}
        out["avg"] = _mean([out[f] for f in setting.families])
        if tpf:
            out.update({f"tpf_{f}": found[f].tokens_per_forward for f in setting.families})
            out["tpf_avg"] = _mean([out[f"tpf_{f}"] for f in setting.families])
        return out

    def items(self, setting: Setting) -> list[dict]:
        """Per family of a setting, its evaluation's {test item: score in [0, 1]}."""
        found = self.found(setting)
        return [found[f].items for f in setting.families]

    def seed_runs(self, setting: Setting, replicates=()) -> list[dict]:
        """The scores of a setting's model and of its extra-seed runs (section ``seeds``), seed order."""
        return [self.scores(s) for s in (setting, *replicates)]

    def seeded(self, row: Row) -> dict:
        """A row's scores as the mean over its seeds, with the standard deviation of each (sample, n - 1), the
        number of seeds and the per-seed averages ("a;b;c"). One seed: its scores, deviations empty."""
        runs = self.seed_runs(row.setting, row.replicates)
        keys = [*row.setting.families, "avg"]
        out = {k: _mean([r[k] for r in runs]) for k in keys}
        out.update({f"{k}_std": _std([r[k] for r in runs]) for k in keys})
        out.update(n_seeds=len(runs), avg_seeds=";".join(f"{r['avg']:.2f}" for r in runs))
        return out

    def decoding(self, setting: Setting) -> dict:
        """The decoding settings the numbers came from, as the evaluations recorded them (one value per row)."""
        rows = self.evals[
            (self.evals.model == setting.model)
            & (self.evals.setting == setting.name)
            & (self.evals.kind == setting.kind)
        ]
        out = {}
        for column in DECODING_COLUMNS:
            values = rows[column].dropna().unique().tolist()
            out[f"decode_{column}"] = values[0] if len(values) == 1 else (math.nan if not values else values)
        return out

    def cost(self, model: str) -> dict:
        """Own optimizer steps / wall time, and the same summed along the init chain (compute-matched view)."""
        if model not in self.job["models"] or self.job["models"][model]["init"] is None or self.results is None:
            return {}
        models_dir = self.results / "models"
        own = training_cost(models_dir, model)
        steps = wall = 0.0
        name = model
        while name in self.job["models"] and self.job["models"][name]["init"] is not None:
            cost = training_cost(models_dir, name)
            steps += cost["optimizer_steps"]
            wall += cost["train_wall_time_s"]
            name = self.job["models"][name]["init"]
        return {**own, "cumulative_steps": steps, "cumulative_wall_time_s": wall}

    def paper(self, name: str) -> pd.DataFrame:
        frame = pd.read_csv(PAPER / name)
        if "model_size" in frame:
            frame = frame[frame.model_size == self.job["paper_model_size"]].drop(columns="model_size")
        return frame

    # -- tables ---------------------------------------------------------------------------------------------
    def table2(self) -> pd.DataFrame:
        table = pd.DataFrame(
            [
                {
                    "row": r.label,  # the paper's row, whose numbers sit beside (its labels name its own epochs)
                    "model": r.setting.model,
                    "epochs": self.job["models"].get(r.setting.model, {}).get("trained", {}).get("epochs"),
                    **self.seeded(r),
                    **self.decoding(r.setting),
                    **self.cost(r.setting.model),
                }
                for r in self.rows
            ]
        )
        return _beside(table, self.paper("table2.csv").rename(columns={"model": "row"}), on="row")

    def table3(self) -> pd.DataFrame:
        table = pd.DataFrame(
            [
                {
                    **r.keys,
                    "row": r.label,
                    "model": r.setting.model,
                    **self.seeded(r),
                    **self.decoding(r.setting),
                    **self.cost(r.setting.model),
                }
                for r in self.rows
            ]
        )
        return _beside(table, self.paper("table3.csv"), on=["sft_loss", "block_size"])

    def table4(self) -> pd.DataFrame:
        rows = []
        for r in self.rows:
            fast, exact = self.scores(r.setting, tpf=True), self.scores(r.reference)
            row = {"row": r.label, "model": r.setting.model, **r.keys, "tau": r.setting.tau}
            for family in FAMILIES:
                row[family] = fast[family]
                row[f"change_{family}"] = fast[family] - exact[family]
                row[f"tpf_{family}"] = fast[f"tpf_{family}"]
            row.update(
                avg_accuracy=fast["avg"],
                avg_change_from_tau1=fast["avg"] - exact["avg"],
                avg_tokens_per_forward=fast["tpf_avg"],
                **self.decoding(r.setting),
            )
            rows.append(row)
        # the paper's numbers only beside rows at its own tau (0.95)
        return _beside(pd.DataFrame(rows), self.paper("table4_summary.csv"), on=["block_size", "tau"])

    def table5(self) -> pd.DataFrame:
        if not self.bench_csv or not Path(self.bench_csv).is_file():
            raise ConfigError(f"benchmark CSV not found: {self.bench_csv}")
        bench = pd.read_csv(self.bench_csv)
        paper = pd.read_csv(PAPER / "table5_summary.csv")
        # The paper's block-cache numbers were measured with the authors' block cache (the whole cache block is the
        # window): they sit beside mars_authors_block_C of the same C, not beside this project's mars_block_C.
        label = {"ar_hf_kv": "AR with KV cache", "mars_none": "MARS no cache"}
        for r in paper.itertuples():
            if r.setting.startswith("MARS block cache (B_cache="):
                label[f"mars_authors_block_{r.setting.split('=')[1].rstrip(')')}"] = r.setting
        speedups = {(r.setting, r.batch_size): r.speedup_vs_ar_kv for r in paper.itertuples()}
        bench["paper_speedup_vs_ar_kv"] = [
            speedups.get((label.get(s, s), b), math.nan) for s, b in zip(bench.setting, bench.batch_size)
        ]
        return bench

    def table6(self) -> pd.DataFrame:
        """``mars speculate``'s rows (spec.csv, read through ``bench_csv``) with the paper's 7B numbers beside the
        draft -> target pairs it reports (AR/AR, AR/MARS, MARS/MARS; the paper's drafts are 0.5B models)."""
        if not self.bench_csv or not Path(self.bench_csv).is_file():
            raise ConfigError(f"speculative decoding CSV not found: {self.bench_csv}")
        spec = pd.read_csv(self.bench_csv, keep_default_na=False, na_values=[""])
        named = set(spec.target_model.dropna()) | set(spec.draft_model.dropna())
        unknown = sorted(named - set(self.job["models"]))
        if unknown:
            raise ConfigError(f"{self.bench_csv} names model {unknown[0]!r}, which is not one of this config's Table 6")
        paper = pd.read_csv(PAPER / "table6.csv")
        kind = {"AR SFT": "ar", "MARS": "mars"}  # the paper's labels: "AR SFT (0.5B)", "MARS (7B; B=4)"
        keys = pd.DataFrame(
            {
                "draft": [kind[label.split(" (")[0]] for label in paper.draft],
                "target": [kind[label.split(" (")[0]] for label in paper.target],
            }
        )
        paper = pd.concat([keys, paper.add_prefix("paper_")], axis=1)
        return spec.merge(paper, on=["draft", "target"], how="left")

    def table8(self) -> pd.DataFrame:
        paper = pd.read_csv(PAPER / "table8_points.csv")  # the paper's sweep points are of its 7B model
        paper = {r.tau: r for r in paper[(paper.task == "gsm8k") & (paper.block_size == 4)].itertuples()}
        rows = []
        for r in self.rows:
            s = self.scores(r.setting, tpf=True)
            # (the paper has no lossless decoding: its numbers sit beside the MARS rows only)
            reference = (
                r.setting.method == "mars"
                and r.keys["block_size"] == 4
                and r.keys["sft_loss"] == "yes"
                and r.setting.tau in paper
            )
            rows.append(
                {
                    "model": r.setting.model,
                    "decoding": r.setting.method,  # mars, or mars_lossless (exactly the greedy output)
                    **r.keys,
                    "tau": r.setting.tau,
                    "gsm8k": s["gsm8k"],
                    "tpf_gsm8k": s["tpf_gsm8k"],
                    "humaneval": s["humaneval"],
                    "tpf_humaneval": s["tpf_humaneval"],
                    "paper_7b_b4_gsm8k": paper[r.setting.tau].accuracy if reference else math.nan,
                    "paper_7b_b4_tpf_gsm8k": paper[r.setting.tau].tokens_per_forward if reference else math.nan,
                    **self.decoding(r.setting),
                }
            )
        return pd.DataFrame(rows)

    def table9(self) -> pd.DataFrame:
        rows = []
        for r in self.rows:
            s = self.scores(r.setting, tpf=True)
            rows.append(
                {
                    "method": r.label,
                    "model": r.setting.model,
                    "avg_accuracy": s["avg"],
                    "avg_tokens_per_forward": s["tpf_avg"],
                    **self.decoding(r.setting),
                }
            )
        return _beside(pd.DataFrame(rows), self.paper("table9_summary.csv"), on="method")

    def real_model(self) -> pd.DataFrame:
        """The harness's real tasks (HumanEval pass@1, %, with its standard error over problems) and the next-token
        loss on real text (CPython's standard library), with its paired differences from Base and AR SFT (standard
        errors over files)."""
        from mars.evaluation.text_loss import paired_difference

        base = self.rows[0].setting.model if self.rows else None
        ar = next((r.setting.model for r in self.rows if r.label.startswith("AR SFT")), None)
        rows = []
        for r in self.rows:
            found = self.found(r.setting)
            row = {"row": r.label, "model": r.setting.model, "tau": r.setting.tau}
            for family in r.setting.families:
                row[family] = found[family].score
                row[f"{family}_se"] = found[family].stderr
                row[f"tpf_{family}"] = found[family].tokens_per_forward
            if self.text_losses:
                record = self.text_losses.get(r.setting.model)
                if record is None:
                    raise ConfigError(f"no text-loss record of {r.setting.model} among the --text-loss files")
                row.update(text_loss=record["loss"], text_tokens=record["tokens"], text_files=record["files"])
                for name, ref in (("base", base), ("ar_sft", ar)):
                    if ref is None or ref == r.setting.model:
                        row[f"text_loss_vs_{name}"], row[f"text_loss_vs_{name}_se"] = math.nan, math.nan
                        continue
                    diff, se = paired_difference(record, self.text_losses[ref])
                    row[f"text_loss_vs_{name}"], row[f"text_loss_vs_{name}_se"] = diff, se
            row.update(self.decoding(r.setting))
            rows.append(row)
        return pd.DataFrame(rows)

    def curve(self) -> pd.DataFrame:
        """The learning curve (docs/smollm2_curve.md): one row per model, in the declared order. Its training budget
        (optimizer steps and example passes, from metrics.json), its losses, accuracy at tau 1.0 and the change
        from the start (± test-item paired standard error), accuracy and tokens per forward at the fast tau, and
        the lossless decoding's tokens per forward and accuracy on the GSM8K-like family."""
        if self.results is None:
            raise ConfigError("the learning-curve table reads the checkpoints' metrics: give --results")
        by_model: dict[str, dict] = {}
        for r in self.rows:
            by_model.setdefault(r.setting.model, {"role": r.keys["role"]})[r.keys["decoding"]] = r
        rows = []
        continuation = next((m for m, v in by_model.items() if v["role"] == "ar_continuation"), None)
        for model, found in by_model.items():
            metrics = read_json(self.results / "models" / model / "metrics.json")
            steps = metrics.get("optimizer_steps", math.nan)
            row = {
                "model": model,
                "role": found["role"],
                "optimizer_steps": steps,
                "example_passes": steps * metrics.get("effective_batch", math.nan),
                "final_loss_mask": metrics.get("final_loss_mask"),
                "final_loss_ar": metrics.get("final_loss_ar"),
                "final_heldout_loss": metrics.get("final_heldout_loss"),
            }
            exact = found["tau1"]
            scores = self.scores(exact.setting)
            row.update({family: scores[family] for family in exact.setting.families})
            row["avg_tau1"] = scores["avg"]
            if exact.reference is not None:
                start = self.scores(exact.reference)
                row["change_vs_start"] = scores["avg"] - start["avg"]
                row["change_vs_start_se"] = item_paired_se(self.items(exact.setting), self.items(exact.reference))
            if found["role"] == "mars" and continuation is not None:
                cont = by_model[continuation]["tau1"].setting
                if read_json(self.results / "models" / continuation / "metrics.json").get("optimizer_steps") == steps:
                    row["change_vs_ar_continuation"] = scores["avg"] - self.scores(cont)["avg"]
                    row["change_vs_ar_continuation_se"] = item_paired_se(self.items(exact.setting), self.items(cont))
            if "fast" in found:
                fast = self.scores(found["fast"].setting, tpf=True)
                row.update(
                    tau=found["fast"].setting.tau,
                    avg_fast=fast["avg"],
                    change_fast_vs_tau1=fast["avg"] - scores["avg"],
                    change_fast_vs_tau1_se=item_paired_se(self.items(found["fast"].setting), self.items(exact.setting)),
                    tpf_fast=fast["tpf_avg"],
                    **{f"tpf_fast_{family}": fast[f"tpf_{family}"] for family in found["fast"].setting.families},
                )
            if "lossless" in found:
                lossless = self.scores(found["lossless"].setting, tpf=True)
                row.update(lossless_gsm8k=lossless["gsm8k"], lossless_tpf_gsm8k=lossless["tpf_gsm8k"])
            rows.append(row)
        table = pd.DataFrame(rows)
        # the paper's MARS B=4 at the same tau, its own model size (a line in the figure)
        paper = self.paper("table4_summary.csv")
        paper = (
            paper[(paper.block_size == 4) & (paper.tau == table["tau"].dropna().iloc[0])]
            if "tau" in table
            else paper[:0]
        )
        table["paper_tpf_fast"] = float(paper.avg_tokens_per_forward.iloc[0]) if len(paper) else math.nan
        return table

    def ablations(self) -> pd.DataFrame:
        """Each ablation against the model it departs from, at tau = 1.0 (and tokens per forward at the fast
        tau, for the multi-token models)."""
        fast_tpf = {}
        for setting in {Setting(**s) for s in self._fast_settings()}:
            fast_tpf[setting.model] = (setting.tau, self.scores(setting, tpf=True)["tpf_avg"])
        rows = []
        for r in self.rows:
            a = [s["avg"] for s in self.seed_runs(r.setting, r.replicates)]
            b = [s["avg"] for s in self.seed_runs(r.reference, r.reference_replicates)]
            tau, tpf = fast_tpf.get(r.setting.model, (math.nan, math.nan))
            delta, se, pairs = difference(a, b)
            half = t_halfwidth(se, pairs)
            rows.append(
                {
                    "ablation": r.label,
                    "model": r.setting.model,
                    "reference": r.reference.model,
                    "avg": _mean(a),
                    "reference_avg": _mean(b[:pairs]),  # over the seeds the model has: delta = avg - this
                    "delta": delta,
                    # over the training seeds both rows have, paired by seed
                    "delta_se": se,
                    "delta_over_se": delta / se if se and not math.isnan(se) else math.nan,
                    "delta_ci95": half,  # t with n - 1 degrees of freedom
                    "verdict": verdict(delta, half),
                    # the first seeds' runs alone, paired by test item: the noise of the test set, not of training
                    "delta_first_seed": _mean(a[:1]) - _mean(b[:1]),
                    "delta_first_seed_se_items": item_paired_se(self.items(r.setting), self.items(r.reference)),
                    "n_seeds": pairs,
                    "avg_seeds": ";".join(f"{v:.2f}" for v in a),
                    "reference_avg_seeds": ";".join(f"{v:.2f}" for v in b),
                    "fast_tau": tau,
                    "avg_tpf_fast_tau": tpf,
                    **self.cost(r.setting.model),
                }
            )
        return pd.DataFrame(rows)

    def _fast_settings(self) -> list[dict]:
        """The multi-token evaluations among the inputs of the ablations (tau < 1 of an ablation model)."""
        models = {r.setting.model for r in self.rows if r.setting.method != "ar"}
        frame = self.evals[(self.evals.model.isin(models)) & (self.evals.tau < 1.0)]
        return [
            {"model": m, "method": meth, "tau": t, "metric": a, "kind": k}
            for m, meth, t, a, k in frame[["model", "method", "tau", "acceptance", "kind"]]
            .drop_duplicates()
            .itertuples(index=False)
        ]

    def cost_table(self) -> pd.DataFrame:
        """Training cost as Snakemake measured each job, and each multi-token model's ratio to its AR start."""
        measured = {Path(p).stem: read_benchmark(p) for p in self.inputs}
        rows = {}
        for model, info in self.job["models"].items():
            if model not in measured:
                raise ConfigError(f"no Snakemake benchmark file for model {model} among the --inputs")
            cost = training_cost(self.results / "models", model)
            steps, before = cost["optimizer_steps"], cost["wall_time_s_before_resume"]
            # Snakemake measured the last invocation of a resumed job only: the earlier ones, as mars train recorded
            # them (each up to its last checkpoint), are added, so that the time is of all the steps it divides
            wall = measured[model]["job_wall_time_s"] + before
            rows[model] = {
                "model": model,
                "method": info["trained"]["method"],
                "block_size": info["trained"]["block_size"],
                "init": info["init"],
                "optimizer_steps": steps,
                **measured[model],
                "job_wall_time_s": wall,
                "wall_time_s_before_resume": before,
                "s_per_step": wall / steps if steps else math.nan,
            }
        for row in rows.values():
            start = rows.get(row["init"])
            multi = row["method"] in ("mars", "block_diffusion") and start and start["method"] in ("ar", "lm")
            row["s_per_step_vs_init"] = row["s_per_step"] / start["s_per_step"] if multi else math.nan
            row["peak_rss_vs_init"] = row["peak_rss_mb"] / start["peak_rss_mb"] if multi else math.nan
        return pd.DataFrame(list(rows.values()))


def _beside(table: pd.DataFrame, paper: pd.DataFrame, on) -> pd.DataFrame:
    """The reproduced rows with the paper's numbers as ``paper_*`` columns (empty where the paper has none)."""
    keys = [on] if isinstance(on, str) else list(on)
    paper = paper.rename(columns={c: f"paper_{c}" for c in paper.columns if c not in keys})
    if table.empty:
        return table
    return table.merge(paper, on=keys, how="left")


def write_table(frame: pd.DataFrame, output: str | Path, caption: str = "") -> None:
    """CSV (the data), Markdown and LaTeX booktabs renderings; each written whole or not at all."""
    output = Path(output)
    # two decimals, but single-forward timings (milliseconds) and next-token losses (0.002 at x8) keep five
    rounded = frame.round(
        {c: 5 if c.startswith("t_") or c.endswith("_loss") or "_loss_vs_" in c else 2 for c in frame.columns}
    )
    texts = {
        output: rounded.to_csv(index=False),
        output.with_suffix(".md"): (f"{caption}\n\n" if caption else "") + rounded.to_markdown(index=False) + "\n",
        output.with_suffix(".tex"): rounded.style.hide(axis="index")
        .format(precision=2, na_rep="--")
        .format({c: "{:.5f}" for c in frame.columns if c.startswith("t_")}, na_rep="--")
        .to_latex(hrules=True, caption=caption or None),
    }
    for path, text in texts.items():
        write_text_atomic(path, text)


CAPTIONS = {
    "table2": "Table 2: one-token mode (tau = 1.0), accuracy (%) per benchmark; paper_* = the paper's numbers.",
    "table3": "Table 3: SFT loss x block size, tau = 1.0.",
    "table4": "Table 4: multi-token mode: accuracy, change from tau = 1.0, and tokens per forward (tpf).",
    "table5": "Table 5: wall-clock decoding on the GSM8K-like prompts: tokens/s and speed-up over AR "
    "(mars_block_C: this project's block cache, B-1 masks per window; mars_authors_block_C: the authors' block "
    "cache, the whole block of C as the window, the definition of the paper's numbers; mars_lossless: our lossless "
    "self-speculative MARS, exactly the greedy tokens; not in the paper).",
    "table6": "Table 6: speculative decoding (batch 1, GSM8K-like prompts): accuracy change vs the target at "
    "tau = 1.0, tokens/s, time, speed-up over AR draft / AR target, tokens and extra tokens per target forward, "
    "draft forwards; "
    "lossless = MARS self-speculative (no draft); paper_* = the paper's 7B target with 0.5B drafts.",
    "table8": "Table 8: tau sweep on the GSM8K- and HumanEval-like tasks: accuracy and tokens per forward "
    "(decoding mars_lossless: our lossless self-speculative MARS, exactly the greedy output).",
    "table9": "Table 9: Jacobi decoding of the AR model vs MARS: average accuracy and tokens per forward.",
    "real_model": "A real model: the harness's own humaneval_instruct on the 164 real HumanEval problems (pass@1 %, "
    "standard error over problems, tokens per forward) and the next-token loss (nats/token) on a fixed sample of "
    "CPython's standard-library source, with paired differences from Base and AR SFT (standard errors over files).",
    "curve": "Learning curve: MARS kept at increasing training budgets (example passes), accuracy at tau = 1.0 "
    "(change from the start, ± test-item paired standard error), accuracy and tokens per forward at the fast tau, "
    "and lossless decoding's tokens per forward on the GSM8K-like family; the start, the AR continuation and "
    "self-distilled arms beside them.",
    "ablations": "Ablations against their reference models (tau = 1.0 average; tokens per forward at the fast tau).",
    "cost": "Training cost per model, measured by Snakemake (wall time, peak RSS; a resumed job's earlier invocations "
    "added as mars train recorded them), and ratios to the AR start.",
    "scaling": "Scaling study: per model size and SFT set size, MARS, MARS w/o L_AR and the AR continuation minus "
    "AR SFT (tau = 1.0 average, standard errors over seeds and over test items), MARS at tau < 1, and AR SFT's "
    "final next-token loss on training vs held-out records.",
}


def make_table(
    job: dict, results: str | Path | None, output: str | Path, inputs=None, bench_csv=None, text_losses=None
) -> pd.DataFrame:
    name = job["table"]
    if name not in CAPTIONS:
        raise ConfigError(f"unknown table {name!r}; expected one of {', '.join(CAPTIONS)}")
    if name == "scaling":
        from mars.report.scaling import Study

        frame = Study(job, results, inputs or []).table()
        write_table(frame, output, CAPTIONS[name])
        return frame
    tables = Tables(job, results, inputs, bench_csv, text_losses)
    frame = tables.cost_table() if name == "cost" else getattr(tables, name)()
    frame = with_machine(with_recipe(frame, job), job, results)
    write_table(frame, output, CAPTIONS[name])
    return frame


def with_recipe(frame: pd.DataFrame, job: dict) -> pd.DataFrame:
    """Each row's training recipe settings (RECIPE_KEYS, where they apply to its model; empty where not), from the
    config the checkpoints were checked against; tables without a model column are returned unchanged."""
    if "model" not in frame.columns or frame.empty:
        return frame
    models = job.get("models", {})
    frame = frame.copy()
    for key in RECIPE_KEYS:
        frame[key] = [models.get(m, {}).get("trained", {}).get(key) for m in frame["model"]]
    return frame


def with_machine(frame: pd.DataFrame, job: dict, results: str | Path | None) -> pd.DataFrame:
    """Each row's ``trained_on``: the machine class and kernel mode its model and the model's extra-seed runs were
    trained with (mars.repro.machine_class of their run_config.json's ``machine``; distinct classes joined by
    " | "; empty for a checkpoint not trained here, or trained before machines were recorded). Another machine
    class or kernel mode can train other weights from the same config (README, "Reproducing the numbers")."""
    if "model" not in frame.columns or frame.empty or results is None:
        return frame
    from mars.repro import machine_class

    models_dir = Path(results) / "models"

    def trained_on(model) -> str:
        if not isinstance(model, str):
            return ""
        runs = [model] + sorted(m for m in job.get("models", {}) if re.fullmatch(rf"{re.escape(model)}_seed\d+", m))
        classes = []
        for run in runs:
            path = models_dir / run / "run_config.json"
            line = machine_class(read_json(path).get("machine")) if path.is_file() else ""
            if line and line not in classes:
                classes.append(line)
        return " | ".join(classes)

    frame = frame.copy()
    frame["trained_on"] = [trained_on(m) for m in frame["model"]]
    return frame
