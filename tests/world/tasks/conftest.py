"""Fixtures shared by the task-family tests: a module-wide split, and an in-process stand-in for the sandbox."""

from __future__ import annotations

import types

import pytest

from mars.evaluation.sandbox import checks
from mars.world.tasks import make_splits
from tests.world.tasks.helpers import N_TEST, N_TRAIN


@pytest.fixture(scope="module")
def splits():
    return make_splits(N_TRAIN, N_TEST, seed=0)


def _fake_runner(program: str, timeout_s: float):
    """In-process stand-in for mars.evaluation.sandbox.supervisor.run_python (only for our own gold code)."""
    import contextlib
    import io

    ns: dict = {}
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(program, "<candidate>", "exec"), ns)
        passed = True
    except BaseException:
        passed = False
    return types.SimpleNamespace(passed=passed, program=program, timeout_s=timeout_s, stdout=out.getvalue())


@pytest.fixture
def fake_sandbox(monkeypatch):
    calls = []

    def run_python(program, timeout_s):
        calls.append((program, timeout_s))
        return _fake_runner(program, timeout_s)

    # run_tests (the marker logic) stays real; only the process it would start is replaced.
    monkeypatch.setattr(checks, "run_python", run_python)
    return calls
