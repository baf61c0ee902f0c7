"""scripts/humaneval_answers.py: the shape of an answer after HumanEval's docstring, by hand."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "humaneval_answers.py"
spec = importlib.util.spec_from_file_location("humaneval_answers", SCRIPT)
humaneval_answers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(humaneval_answers)


@pytest.mark.parametrize(
    "generation,shape,first",
    [
        ("    return a + b\n", "body", "return a + b"),
        ("\n\n\tfor x in xs:\n\t\tpass", "body", "for x in xs:"),
        ("\n# Test the function\nprint(add(1, 2))\n", "top-level", "# Test the function"),
        ("def helper():\n    return 1", "top-level", "def helper():"),
        ("```\n    return 1", "empty", ""),  # the fence closes the answer before the indented line
        ("  \n", "empty", ""),
    ],
)
def test_answer_shape(generation, shape, first):
    assert humaneval_answers.answer_shape(generation) == (shape, first)


def test_a_top_level_answer_that_defines_the_function_again_is_counted_apart():
    prompt = "```python\nfrom typing import List\n\n\ndef helper(x):\n    pass\n\n\n"
    prompt += 'def add(a, b):\n    """Sum."""\n'
    assert humaneval_answers.redefines("\n# Your solution\ndef add(a, b):\n    return a + b\n", prompt)
    assert not humaneval_answers.redefines("\ndef helper(x):\n    return x\n", prompt)  # not the function asked for
    assert not humaneval_answers.redefines("\n    def add(a, b):\n        return a + b\n", prompt)  # nested
    assert not humaneval_answers.redefines("```\ndef add(a, b):\n    return 1\n", prompt)  # after the fence


def test_summary_counts_passes_and_shapes():
    record = {
        "model": {"name": "m"},
        "tau": 1.0,
        "eval_args": {"until": ["```"]},
        "samples": [
            {"generation": "    return 1\n", "metrics": {"pass@1,create_test": 1.0}},
            {"generation": "    return 2\n", "metrics": {"pass@1,create_test": 0.0}},
            {"generation": "# Test\nprint(f())", "metrics": {"pass@1,create_test": 0.0}},
        ],
    }
    summary = humaneval_answers.summarize(record)
    assert summary["passed"] == 1 and summary["problems"] == 3 and summary["until"] == ["```"]
    assert summary["shapes"] == {"body": 2, "top-level": 1} and summary["top_level_starts"] == [("#", 1)]
    assert summary["top_level_redefining_the_function"] == 0
