"""MLflow store: parallel jobs that meet a fresh sqlite store all succeed and all land in it."""

import subprocess
import sys

# Each job starts one run on the same, not yet existing, store. Without serialising the store's creation, MLflow's
# schema migration in one process collides with another's ("duplicate column name") and a job dies.
JOB = """
import sys
from mars.tracking import mlflow_run
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
    from mars.tracking import tracking_uri

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://login-node:5000")
    assert tracking_uri(tmp_path / "results") == "http://login-node:5000"
    assert not (tmp_path / "results").exists()  # no sqlite file is made
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert tracking_uri(tmp_path / "results") == f"sqlite:///{(tmp_path / 'results' / 'mlflow.db').resolve()}"
