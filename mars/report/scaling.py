"""The scaling study's table (``results/tables/scaling.csv``): per point (model size, SFT set size) what MARS does
to the AR SFT model it starts from, beside its two controls, and the data regime the point is in.

Per point: the model's parameters and the SFT records, AR SFT's tau-1.0 average, MARS (B as configured) minus AR,
MARS without L_AR minus AR, and the AR continuation (the same further epochs with the AR objective) minus AR, each
with standard errors: over training seeds where the point has extra-seed runs (``*_se_seeds``, paired by seed), and
over test items at every point (``*_se_test``: from the harness's per-task standard errors, the two models taken as
independent, so an upper bound for a paired comparison). Then MARS's tokens per forward and accuracy change at each
tau below 1, AR SFT's final next-token loss on as many training records vs on the held-out records (the regime:
memorised when the first is far below the second), the held-out loss after the second stage, and the training time
of the point's own models.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pandas as pd

from mars.pipeline.config import ConfigError
from mars.pipeline.experiments import FAMILIES, setting_name
from mars.report.collect import collect_evals, read_json
from mars.report.stats import _mean, difference, t_halfwidth


def parameter_count(model_dir: Path) -> int:
    """Parameters of a saved checkpoint, from its safetensors headers (tied embeddings counted once)."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise ConfigError(f"no safetensors weights in {model_dir}")
    total = 0
    for path in files:
        with open(path, "rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(size))
        for name, info in header.items():
            if name != "__metadata__":
                total += math.prod(info["shape"])
    return total


class Study:
    def __init__(self, job: dict, results: str | Path, inputs: list):
        self.job = job
        self.results = Path(results)
        self.evals = collect_evals(inputs)

    def result(self, model: str, tau: float) -> dict:
        """avg (%), its test-item standard error and tokens per forward of one model at one tau, six families."""
        name = setting_name(self.job["methods"][model], tau, self.job["metric"])
        rows = self.evals[(self.evals.model == model) & (self.evals.setting == name) & (self.evals.kind == "eval")]
        found = {r.family: r for r in rows.itertuples()}
        missing = [f for f in FAMILIES if f not in found]
        if missing:
            raise ConfigError(f"no eval result for {model} {name} {missing[0]} among the --inputs")
        return {
            "avg": _mean([found[f].score for f in FAMILIES]),
            "se": math.sqrt(sum(found[f].stderr ** 2 for f in FAMILIES)) / len(FAMILIES),
            "tpf": _mean([found[f].tokens_per_forward for f in FAMILIES]),
        }

    def seeds(self, model: str, tau: float) -> list[float]:
        return [self.result(m, tau)["avg"] for m in (model, *self.job["replicates"].get(model, []))]

    def compare(self, model: str, reference: str, prefix: str) -> dict:
        a, b = self.result(model, 1.0), self.result(reference, 1.0)
        delta, se_seeds, pairs = difference(self.seeds(model, 1.0), self.seeds(reference, 1.0))
        return {
            f"{prefix}_minus_ar": delta,  # paired by seed over the seeds both have (else the seed-0 runs)
            f"{prefix}_minus_ar_se_seeds": se_seeds,
            f"{prefix}_minus_ar_ci95_seeds": t_halfwidth(se_seeds, pairs),
            f"{prefix}_minus_ar_se_test": math.sqrt(a["se"] ** 2 + b["se"] ** 2),
        }

    def metrics(self, model: str) -> dict:
        return read_json(self.results / "models" / model / "metrics.json")

    def row(self, point: dict) -> dict:
        m = point["models"]
        ar_metrics = self.metrics(m["ar"])
        config = read_json(self.results / "models" / m["ar"] / "config.json")
        own = [m["ar"], m["mars"], m["nolar"], m["cont"]] + ([m["base"]] if point["axis"] == "model size" else [])
        row = {
            "point": point["point"],
            "axis": point["axis"],
            "hidden_size": config.get("hidden_size"),
            "parameters": parameter_count(self.results / "models" / m["ar"]),
            "sft_records": ar_metrics.get("num_examples"),
            "n_seeds": len(self.seeds(m["ar"], 1.0)),
            "ar_avg": _mean(self.seeds(m["ar"], 1.0)),
            "mars_avg": _mean(self.seeds(m["mars"], 1.0)),
            **self.compare(m["mars"], m["ar"], "mars"),
            **self.compare(m["nolar"], m["ar"], "nolar"),
            **self.compare(m["cont"], m["ar"], "cont"),
        }
        exact = self.result(m["mars"], 1.0)
        for tau in self.job["taus"]:
            if tau < 1.0:
                fast = self.result(m["mars"], tau)
                row[f"mars_tpf_tau{tau:g}"] = fast["tpf"]
                row[f"mars_change_tau{tau:g}"] = fast["avg"] - exact["avg"]
        row.update(
            ar_train_loss=ar_metrics.get("final_train_slice_loss"),
            ar_heldout_loss=ar_metrics.get("final_heldout_loss"),
            mars_heldout_loss=self.metrics(m["mars"]).get("final_heldout_loss"),
            nolar_heldout_loss=self.metrics(m["nolar"]).get("final_heldout_loss"),
            cont_heldout_loss=self.metrics(m["cont"]).get("final_heldout_loss"),
            cont_train_loss=self.metrics(m["cont"]).get("final_train_slice_loss"),
            train_wall_time_s=sum(
                self.metrics(x).get("train_runtime_s") or self.metrics(x).get("wall_time_s") or math.nan for x in own
            ),
            **{f"{role}_model": m[role] for role in ("base", "ar", "mars", "nolar", "cont")},
        )
        return row

    def table(self) -> pd.DataFrame:
        return pd.DataFrame([self.row(p) for p in self.job["points"]])
