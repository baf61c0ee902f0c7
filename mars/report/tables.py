"""The paper's tables, regenerated from the pipeline's outputs, with the paper's own numbers beside them.

    mars report table --name table2 --config config.yaml --results results/tiny --output results/tables/table2.csv

writes ``table2.csv`` plus ``table2.md`` (Markdown) and ``table2.tex`` (LaTeX, booktabs) next to it.  Model rows
name config entries by convention (``ar_sft_5ep``, ``mars_b4``, ``mars_nolar_b8``...); rows whose model the config
lacks are left out.  Scores are percentages; ``tpf`` = tokens per forward.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from mars.config import ConfigError
from mars.report.collect import FAMILIES, collect_evals, setting_name, training_cost

PAPER = Path(__file__).parent / "paper_reference"
TAUS_SWEEP = (1.0, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5)


def decode_method(config: dict, model: str) -> str:
    """How a model is decoded: block diffusion its own way, MARS models by the window, the rest as plain AR."""
    if model not in config["models"]:
        return "ar"  # the world's base checkpoint (paper profile)
    method = config["models"][model]["method"]
    return {"block_diffusion": "block_diffusion", "mars": "mars"}.get(method, "ar")


def base_model(config: dict) -> str:
    return config.get("report", {}).get("base_model", "base" if config["world"]["kind"] == "tiny" else "world")


def model_size(config: dict) -> str:
    return config.get("report", {}).get("paper_model_size", "0.5B")


def cumulative_cost(config: dict, models_dir: Path, model: str) -> dict:
    """Own optimizer steps / wall time, and the same summed along the init chain (compute-matched view)."""
    own = training_cost(models_dir, model)
    steps, wall, name = 0.0, 0.0, model
    while name in config["models"]:
        cost = training_cost(models_dir, name)
        steps += cost["optimizer_steps"]
        wall += cost["train_wall_time_s"]
        name = config["models"][name].get("init", "world")
    return {**own, "cumulative_steps": steps, "cumulative_wall_time_s": wall}


class Tables:
    def __init__(self, config: dict, results: str | Path, eval_files: list | None = None,
                 bench_csv: str | Path | None = None):
        self.config = config
        self.results = Path(results)
        self.evals = collect_evals(self.results / "eval", eval_files)
        self.bench_csv = bench_csv

    # -- lookups --------------------------------------------------------------------------------------------
    def scores(self, model: str, tau: float, metric: str = "probability", method: str | None = None) -> dict:
        setting = setting_name(method or decode_method(self.config, model), tau, metric)
        rows = self.evals[(self.evals.model == model) & (self.evals.setting == setting)]
        return {r.family: r for r in rows.itertuples()}

    def row(self, label: str, model: str, tau: float = 1.0, *, tpf: bool = False, method: str | None = None) -> dict:
        found = self.scores(model, tau, method=method)
        if not found:
            return {}
        out = {"row": label, "model": model}
        for family in FAMILIES:
            out[family] = found[family].score if family in found else math.nan
        out["avg"] = _mean([out[f] for f in FAMILIES])
        if tpf:
            for family in FAMILIES:
                out[f"tpf_{family}"] = found[family].tokens_per_forward if family in found else math.nan
            out["tpf_avg"] = _mean([out[f"tpf_{f}"] for f in FAMILIES])
        return out

    def with_cost(self, row: dict) -> dict:
        if row and row["model"] in self.config["models"]:
            row.update(cumulative_cost(self.config, self.results / "models", row["model"]))
        return row

    # -- tables ---------------------------------------------------------------------------------------------
    def table2(self) -> pd.DataFrame:
        rows = [("Base", base_model(self.config)), ("AR SFT (5 ep)", "ar_sft_5ep"), ("AR SFT (10 ep)", "ar_sft_10ep"),
                ("Block Diffusion (B=4)", "block_diffusion_b4"), ("MARS w/o SFT loss (B=4)", "mars_nolar_b4"),
                ("MARS (B=4)", "mars_b4")]
        table = pd.DataFrame([r for r in (self.with_cost(self.row(*x)) for x in rows) if r])
        paper = pd.read_csv(PAPER / "table2.csv")
        paper = paper[paper.model_size == model_size(self.config)].drop(columns="model_size").rename(columns={"model": "row"})
        return _beside(table, paper, on="row")

    def table3(self) -> pd.DataFrame:
        rows = []
        for sft, prefix in (("no", "mars_nolar_b"), ("yes", "mars_b")):
            for block in (4, 8, 16):
                row = self.with_cost(self.row(f"SFT loss {sft}, B={block}", f"{prefix}{block}"))
                if row:
                    rows.append({"sft_loss": sft, "block_size": block, **row})
        paper = pd.read_csv(PAPER / "table3.csv")
        paper = paper[paper.model_size == model_size(self.config)].drop(columns="model_size")
        return _beside(pd.DataFrame(rows), paper, on=["sft_loss", "block_size"])

    def table4(self) -> pd.DataFrame:
        rows = []
        for block in (4, 8, 16):
            model = f"mars_b{block}"
            fast, exact = self.row("", model, 0.95, tpf=True), self.row("", model, 1.0)
            if not fast or not exact:
                continue
            row = {"row": f"MARS (B={block})", "model": model, "block_size": block, "tau": 0.95}
            for family in FAMILIES:
                row[family] = fast[family]
                row[f"change_{family}"] = fast[family] - exact[family]
                row[f"tpf_{family}"] = fast[f"tpf_{family}"]
            row.update(avg_accuracy=fast["avg"], avg_change_from_tau1=fast["avg"] - exact["avg"],
                       avg_tokens_per_forward=fast["tpf_avg"])
            rows.append(row)
        paper = pd.read_csv(PAPER / "table4_summary.csv")
        paper = paper[paper.model_size == model_size(self.config)].drop(columns=["model_size", "tau"])
        return _beside(pd.DataFrame(rows), paper, on="block_size")

    def table5(self) -> pd.DataFrame:
        if not self.bench_csv or not Path(self.bench_csv).is_file():
            raise ConfigError(f"benchmark CSV not found: {self.bench_csv}")
        bench = pd.read_csv(self.bench_csv)
        paper = pd.read_csv(PAPER / "table5_summary.csv")
        label = {"ar_hf_kv": "AR with KV cache", "mars_none": "MARS no cache"}
        speedups = {}
        for r in paper.itertuples():
            key = "MARS block cache" if r.setting.startswith("MARS block cache") else r.setting
            speedups[(key, r.batch_size)] = r.speedup_vs_ar_kv
        bench["paper_speedup_vs_ar_kv"] = [
            speedups.get((label.get(s, "MARS block cache" if s.startswith("mars_block_") else s), b), math.nan)
            for s, b in zip(bench.setting, bench.batch_size)]
        return bench

    def table8(self) -> pd.DataFrame:
        rows = []
        for model in ("mars_b4", "mars_b8", "mars_b16", "mars_nolar_b4", "mars_nolar_b8", "mars_nolar_b16"):
            for tau in TAUS_SWEEP:
                found = self.scores(model, tau)
                if not {"gsm8k", "humaneval"} <= found.keys():
                    continue
                rows.append({"model": model, "tau": tau,
                             "gsm8k": found["gsm8k"].score, "tpf_gsm8k": found["gsm8k"].tokens_per_forward,
                             "humaneval": found["humaneval"].score,
                             "tpf_humaneval": found["humaneval"].tokens_per_forward})
        table = pd.DataFrame(rows)
        paper = pd.read_csv(PAPER / "table8_points.csv")
        paper = paper[(paper.task == "gsm8k") & (paper.block_size == 4)]
        if not table.empty:
            lookup = {r.tau: r for r in paper.itertuples()}
            table["paper_7b_b4_gsm8k"] = [lookup[t].accuracy if m == "mars_b4" and t in lookup else math.nan
                                          for m, t in zip(table.model, table.tau)]
            table["paper_7b_b4_tpf_gsm8k"] = [lookup[t].tokens_per_forward if m == "mars_b4" and t in lookup
                                              else math.nan for m, t in zip(table.model, table.tau)]
        return table

    def table9(self) -> pd.DataFrame:
        jacobi = self.row("Jacobi decoding", "ar_sft_5ep", 1.0, tpf=True, method="jacobi")
        mars = self.row("MARS (tau=0.95)", "mars_b4", 0.95, tpf=True)
        rows = [r for r in (jacobi, mars) if r]
        table = pd.DataFrame([{"method": r["row"], "model": r["model"], "avg_accuracy": r["avg"],
                               "avg_tokens_per_forward": r["tpf_avg"]} for r in rows])
        paper = pd.read_csv(PAPER / "table9_summary.csv")
        paper = paper[paper.model_size == model_size(self.config)].drop(columns="model_size")
        return _beside(table, paper, on="method")

    def ablations(self) -> pd.DataFrame:
        """Each ablation against the model it departs from, at tau = 1.0 (and tokens per forward at 0.95)."""
        pairs = [("no L_AR", "mars_nolar_b4", "mars_b4"), ("no L_AR", "mars_nolar_b8", "mars_b8"),
                 ("no L_AR", "mars_nolar_b16", "mars_b16"), ("bidirectional block", "mars_bidir_b4", "mars_b4"),
                 ("block diffusion", "block_diffusion_b4", "mars_b4"), ("10-epoch AR", "ar_sft_10ep", "ar_sft_5ep")]
        rows = []
        for name, model, reference in pairs:
            a, b = self.row(name, model), self.row(name, reference)
            if not a or not b:
                continue
            fast = self.row(name, model, 0.95, tpf=True) if decode_method(self.config, model) != "ar" else {}
            rows.append({"ablation": name, "model": model, "reference": reference, "avg": a["avg"],
                         "reference_avg": b["avg"], "delta": a["avg"] - b["avg"],
                         "avg_tpf_tau0.95": fast.get("tpf_avg", math.nan),
                         **{k: v for k, v in cumulative_cost(self.config, self.results / "models", model).items()}})
        return pd.DataFrame(rows)


def _mean(values: list[float]) -> float:
    values = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
    return sum(values) / len(values) if values else math.nan


def _beside(table: pd.DataFrame, paper: pd.DataFrame, on) -> pd.DataFrame:
    """The reproduced rows with the paper's numbers as ``paper_*`` columns (empty where the paper has none)."""
    keys = [on] if isinstance(on, str) else list(on)
    paper = paper.rename(columns={c: f"paper_{c}" for c in paper.columns if c not in keys})
    if table.empty:
        return table
    return table.merge(paper, on=keys, how="left")


TABLES = ("table2", "table3", "table4", "table5", "table8", "table9", "ablations")


def write_table(frame: pd.DataFrame, output: str | Path, caption: str = "") -> None:
    """CSV (the data), Markdown and LaTeX booktabs renderings; each written whole or not at all."""
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # two decimals, but single-forward timings (milliseconds) keep five
    rounded = frame.round({c: 5 if c.startswith("t_") else 2 for c in frame.columns})
    texts = {
        output: rounded.to_csv(index=False),
        output.with_suffix(".md"): (f"{caption}\n\n" if caption else "") + rounded.to_markdown(index=False) + "\n",
        output.with_suffix(".tex"): rounded.style.hide(axis="index").format(precision=2, na_rep="--")
        .format({c: "{:.5f}" for c in frame.columns if c.startswith("t_")}, na_rep="--")
        .to_latex(hrules=True, caption=caption or None),
    }
    for path, text in texts.items():
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(text)
        tmp.replace(path)


CAPTIONS = {
    "table2": "Table 2: one-token mode (tau = 1.0), accuracy (%) per benchmark; paper_* = the paper's numbers.",
    "table3": "Table 3: SFT loss x block size, tau = 1.0.",
    "table4": "Table 4: tau = 0.95: accuracy, change from tau = 1.0, and tokens per forward (tpf).",
    "table5": "Table 5: wall-clock decoding on the GSM8K-like prompts (tau = 0.95): tokens/s and speed-up over AR.",
    "table8": "Table 8: tau sweep on the GSM8K- and HumanEval-like tasks: accuracy and tokens per forward.",
    "table9": "Table 9: Jacobi decoding of the AR model vs MARS (tau = 0.95): average accuracy and tokens per forward.",
    "ablations": "Ablations against their reference models (tau = 1.0 average; tokens per forward at tau = 0.95).",
}


def make_table(name: str, config: dict, results: str | Path, output: str | Path, eval_files=None,
               bench_csv=None) -> pd.DataFrame:
    if name not in TABLES:
        raise ConfigError(f"unknown table {name!r}; expected one of {', '.join(TABLES)}")
    frame = getattr(Tables(config, results, eval_files, bench_csv), name)()
    write_table(frame, output, CAPTIONS[name])
    return frame
