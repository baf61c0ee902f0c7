"""MLflow tracking: one sqlite store per results folder (MLflow 3 refuses a plain ./mlruns file store).

``MLFLOW_TRACKING_URI`` overrides the store.  Parallel jobs share the sqlite file, so writes retry on a locked
database instead of failing the job.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

_RETRIES = 8


def tracking_uri(results_dir: str | Path = "results") -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    path = Path(results_dir).resolve()
    path.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path / 'mlflow.db'}"


def _retry(fn, *args, **kwargs):
    delay = 0.2
    for attempt in range(_RETRIES):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # sqlite "database is locked" surfaces as several exception types
            if "locked" not in str(exc).lower() or attempt == _RETRIES - 1:
                raise
            time.sleep(delay)
            delay *= 2


def git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, cwd=Path(__file__).resolve().parent
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# Subpackages that no evaluation runs (`mars eval` never imports them: tests/test_evaluate.py checks): the tables and
# figures read results, the benchmarks compute none that is resumed. (The CLI's parser imports mars.serving.)
NOT_EVALUATION_CODE = ("report", "bench")


@functools.cache
def source_digest(package: Path = Path(__file__).resolve().parents[1]) -> str:
    """A digest of the code that computes evaluation results: every file of the ``mars`` package (committed or not;
    caches and :data:`NOT_EVALUATION_CODE` aside) and the versions of torch, transformers and lm-eval. Unlike the
    commit, a change to the docs, tests, scripts or tables leaves it as it is, and an uncommitted edit to the
    decoder changes it. Computed once per process, when first asked (``mars eval`` asks before it loads anything:
    the code this process runs)."""
    from importlib.metadata import PackageNotFoundError, version

    def counted(path: Path) -> bool:
        parts = path.relative_to(package).parts
        hidden = any(part.startswith(".") for part in parts) or path.name.endswith("~")  # editors' files
        return path.is_file() and not hidden and "__pycache__" not in parts and parts[0] not in NOT_EVALUATION_CODE

    digest = hashlib.sha256()
    for path in sorted(p for p in package.rglob("*") if counted(p)):
        try:
            content = path.read_bytes()
        except FileNotFoundError:  # removed since the listing (an editor's temporary file)
            continue
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + content + b"\0")
    for name in ("torch", "transformers", "lm_eval"):
        try:
            digest.update(f"{name}={version(name)}\0".encode())
        except PackageNotFoundError:
            digest.update(f"{name}=none\0".encode())
    return digest.hexdigest()[:16]


def machine_tags() -> dict:
    """The machine facts of this process (mars.repro.machine_facts: CPU, kernels and kernel mode in effect,
    threads, library versions) as ``machine.<fact>`` tags: two runs of one config on two machines say how they
    differ. Reading them fixes this process's kernels (a run's kernel mode is chosen before it logs)."""
    from mars.repro import machine_facts

    facts = machine_facts()
    return {f"machine.{k}": json.dumps(v) if isinstance(v, dict) else str(v) for k, v in facts.items()}


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]


@contextlib.contextmanager
def _store_creation_lock(uri: str):
    """Serialise the first contact with a sqlite store: MLflow creates and migrates its schema then, and two jobs
    doing that at once on a fresh file fail ("duplicate column name")."""
    if not uri.startswith("sqlite:///"):
        yield
        return
    path = Path(uri[len("sqlite:///") :])
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@contextlib.contextmanager
def mlflow_run(experiment: str, run_name: str, *, results_dir="results", tags=None, params=None, run_id=None):
    """Start (or, with ``run_id``, resume) a run; yields the mlflow module with the run active."""
    import mlflow

    uri = tracking_uri(results_dir)
    mlflow.set_tracking_uri(uri)
    with _store_creation_lock(uri):
        # artifacts next to the store, under the results folder (MLflow's default is ./mlruns of the cwd)
        if _retry(mlflow.get_experiment_by_name, experiment) is None:
            artifacts = (Path(results_dir).resolve() / "mlartifacts" / experiment).as_uri()
            _retry(mlflow.create_experiment, experiment, artifact_location=artifacts)
        _retry(mlflow.set_experiment, experiment)
    run = _retry(mlflow.start_run, run_id=run_id, run_name=None if run_id else run_name)
    try:
        if not run_id:
            # The workflow exports the hash of its config, so every run of one pipeline carries it.
            context = {"config_hash": os.environ["MARS_CONFIG_HASH"]} if os.environ.get("MARS_CONFIG_HASH") else {}
            _retry(mlflow.set_tags, {"git_commit": git_commit(), **context, **machine_tags(), **(tags or {})})
            if params:
                _retry(mlflow.log_params, {k: str(v)[:500] for k, v in params.items()})
        yield mlflow
    except BaseException:
        _retry(mlflow.end_run, status="FAILED")
        raise
    else:
        _retry(mlflow.end_run)
    finally:
        del run


def log_metrics(metrics: dict, step: int | None = None) -> None:
    import mlflow

    numeric = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    if numeric:
        _retry(mlflow.log_metrics, numeric, step=step)


def log_measurement(
    kind: str,
    checkpoint,
    files: list[Path],
    *,
    params: dict,
    metric_rows: list[dict],
    experiment: str | None,
    results_dir: str,
) -> None:
    """One MLflow run of a measurement job (``mars bench``, ``mars speculate``) on ``checkpoint``: in ``experiment``,
    else the checkpoint's own training experiment, else ``mars-<kind>``; tagged with the job's kind and the trained
    run it measured; ``params``, one ``log_metrics`` call per dict of ``metric_rows``, ``files`` as artifacts."""
    run_config = Path(checkpoint) / "run_config.json"
    trained = json.loads(run_config.read_text()) if run_config.is_file() else {}
    name = Path(checkpoint).name
    tags = {"kind": kind, "rule": kind, "model": name, "trained_run_id": str(trained.get("mlflow_run_id"))}
    with mlflow_run(
        experiment or trained.get("experiment", f"mars-{kind}"),
        f"{kind}/{name}",
        results_dir=results_dir,
        tags=tags,
        params=params,
    ) as mlflow:
        for metrics in metric_rows:
            log_metrics(metrics)
        for path in files:
            mlflow.log_artifact(str(path))
