"""MLflow store: parallel jobs that meet a fresh sqlite store all succeed and all land in it."""

import subprocess
import sys

# Each job starts one run on the same, not yet existing, store. Without serialising the store's creation, MLflow's
# schema migration in one process collides with another's ("duplicate column name") and a job dies.
JOB = """
import sys
from mars.pipeline.tracking import mlflow_run
with mlflow_run("race", sys.argv[2], results_dir=sys.argv[1]) as mlflow:
    mlflow.log_metric("x", 1.0)
"""


def test_parallel_jobs_on_a_fresh_store_all_succeed(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    store_dir = tmp_path / "results"
    jobs = [
        subprocess.Popen([sys.executable, "-c", JOB, str(store_dir), f"job{i}"], stderr=subprocess.PIPE, text=True)
        for i in range(4)
    ]
    errors = [job.communicate(timeout=300)[1] for job in jobs]
    assert [job.returncode for job in jobs] == [0] * 4, "\n".join(e[-500:] for e in errors)

    import mlflow

    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{store_dir / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("race").experiment_id])
    assert sorted(run.info.run_name for run in runs) == [f"job{i}" for i in range(4)]


def test_mlflow_tracking_uri_overrides_the_sqlite_store(tmp_path, monkeypatch):
    """On a shared file system without reliable fcntl locks the store is a server: every job honours the variable
    (sbatch hands the login node's environment on to the jobs)."""
    from mars.pipeline.tracking import tracking_uri

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://login-node:5000")
    assert tracking_uri(tmp_path / "results") == "http://login-node:5000"
    assert not (tmp_path / "results").exists()  # no sqlite file is made
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert tracking_uri(tmp_path / "results") == f"sqlite:///{(tmp_path / 'results' / 'mlflow.db').resolve()}"


def test_a_measurement_run_lands_in_the_trained_models_experiment(tmp_path, monkeypatch):
    """``log_measurement`` (bench, speculate): the checkpoint's own experiment, tags naming the trained run it measured,
    params, one metrics dict per row, the output files as artifacts."""
    import json

    import mlflow

    from mars.pipeline.tracking import log_measurement, tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    checkpoint = tmp_path / "models" / "mars_b4"
    checkpoint.mkdir(parents=True)
    (checkpoint / "run_config.json").write_text(json.dumps({"experiment": "exp-a", "mlflow_run_id": "r123"}))
    out = tmp_path / "bench"
    out.mkdir()
    (out / "bench.csv").write_text("batch_size,speedup\n1,1.5\n")
    results = str(tmp_path / "results")
    rows = [{"mars_cursor_b1_speedup": 1.5}, {"mars_cursor_b4_speedup": 1.25}]
    log_measurement(
        "bench", checkpoint, [out / "bench.csv"], params={"reps": 5}, metric_rows=rows, experiment=None,
        results_dir=results,
    )  # fmt: skip
    client = mlflow.tracking.MlflowClient(tracking_uri=tracking_uri(results))
    (run,) = client.search_runs([client.get_experiment_by_name("exp-a").experiment_id])
    assert run.info.status == "FINISHED" and run.info.run_name == "bench/mars_b4"
    tags = run.data.tags
    assert (tags["kind"], tags["rule"], tags["model"], tags["trained_run_id"]) == ("bench", "bench", "mars_b4", "r123")
    assert run.data.params == {"reps": "5"}
    assert run.data.metrics == {"mars_cursor_b1_speedup": 1.5, "mars_cursor_b4_speedup": 1.25}
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["bench.csv"]
    # a checkpoint without run_config.json (and no experiment given) falls back to mars-<kind>
    bare = tmp_path / "bare"
    bare.mkdir()
    log_measurement("speculate", bare, [], params={}, metric_rows=[], experiment=None, results_dir=results)
    assert client.get_experiment_by_name("mars-speculate") is not None


def test_the_source_digest_follows_the_package_files_and_nothing_else(tmp_path):
    from mars.pipeline.tracking import source_digest

    package = tmp_path / "mars"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (package / "sub" / "b.yaml").write_text("k: v\n")
    first = source_digest.__wrapped__(package)
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0compiled")
    (tmp_path / "README.md").write_text("docs beside the package\n")
    (package / "report").mkdir()
    (package / "report" / "tables.py").write_text("# reads results, computes none\n")
    # caches, files outside the package and the subpackages no evaluation runs: the same code
    assert source_digest.__wrapped__(package) == first
    (package / "sub" / "b.yaml").write_text("k: w\n")  # an edit, committed or not
    assert source_digest.__wrapped__(package) != first
    (package / "sub" / "b.yaml").write_text("k: v\n")
    (package / "sub" / "b.yaml").rename(package / "b.yaml")  # the same bytes at another path
    assert source_digest.__wrapped__(package) != first
