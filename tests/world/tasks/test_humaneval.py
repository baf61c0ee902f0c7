"""The humaneval family: code extraction, what reaches the sandbox, the real sandbox."""

from __future__ import annotations

from mars.evaluation.sandbox import checks
from mars.world import tasks as T
from mars.world.tasks import make_splits, score
from tests.world.tasks.helpers import by_family


def test_code_extraction():
    assert T.extract_code("Here:\n```python\ndef f(x):\n    return x\n```\nDone.") == "def f(x):\n    return x\n"
    assert T.extract_code("```py\ndef f(x):\n    return x\n```") == "def f(x):\n    return x\n"
    assert T.extract_code("```\ndef f(x): return 1\n```") == "def f(x): return 1\n"
    assert T.extract_code("```python\ndef f(x):\n    return x") == "def f(x):\n    return x"  # truncated
    assert T.extract_code("def f(x):\n    return x") == "def f(x):\n    return x"
    assert T.extract_code("```python\na = 1\n```\n```python\nb = 2\n```") == "a = 1\n"


def test_humaneval_program_sent_to_sandbox(fake_sandbox):
    x = by_family(make_splits(5, 5, seed=0)[1], "humaneval")[0]
    assert score("humaneval", x["response"], x["target"]) == {"pass@1": 1.0}
    program, timeout = fake_sandbox[-1]
    assert program.startswith("def " + x["target"]["entry_point"])
    assert x["target"]["test"] in program and f"check({x['target']['entry_point']})" in program
    assert timeout == T.HUMANEVAL_TIMEOUT_S
    n = len(fake_sandbox)
    assert score("humaneval", "", x["target"]) == {"pass@1": 0.0}
    assert len(fake_sandbox) == n  # empty code never reaches the sandbox


def test_humaneval_sandbox_errors_score_zero(monkeypatch):
    def boom(program, timeout_s):
        raise RuntimeError("sandbox exploded")

    monkeypatch.setattr(checks, "run_python", boom)
    assert score("humaneval", "def f(): pass", {"test": "assert True"}) == {"pass@1": 0.0}


# -------------------------------------------------------- the real sandbox


def test_real_sandbox_scores_gold_and_wrong_code():
    # No skip: humaneval scoring without a working sandbox is a broken evaluation, and must fail here.
    test = make_splits(0, 8, seed=0)[1]
    for x in by_family(test, "humaneval"):
        assert score("humaneval", x["response"], x["target"]) == {"pass@1": 1.0}, x["response"]
        name = x["target"]["entry_point"]
        wrong = f"```python\ndef {name}(*args):\n    return None\n```"
        assert score("humaneval", wrong, x["target"]) == {"pass@1": 0.0}
    assert score("humaneval", "import sys\nsys.exit(3)", {"test": "assert True"}) == {"pass@1": 0.0}


def test_humaneval_early_exit_does_not_pass():
    """A program that exits 0 before the asserts run is a failure (real sandbox)."""
    x = by_family(make_splits(5, 5, seed=0)[1], "humaneval")[0]
    assert score("humaneval", x["response"], x["target"]) == {"pass@1": 1.0}
    cheat = "```python\nimport sys\nsys.exit(0)\n```"
    assert score("humaneval", cheat, x["target"]) == {"pass@1": 0.0}
    cheat = "```python\nimport os\nos._exit(0)\n```"
    assert score("humaneval", cheat, x["target"]) == {"pass@1": 0.0}
