"""What a model writes after HumanEval's docstring: the shapes of its answers in `mars eval` records of the
harness's `humaneval_instruct` (docs/smollm2.md, "Real HumanEval").

The task's generation prefix ends with the problem's signature and docstring, so an answer that can pass must go on
with the function's indented body. Each answer (the text generated after the prefix, up to the stop sequences the
record names, or to the closing code fence with `mars eval --until '```'`) is one of:

    body        its first non-blank line is indented: the function goes on (passing or not)
    top-level   its first non-blank line starts at column 0 (a comment, test code, another `def`, a `print`): the
                function is left without a body
    empty       nothing before the fence or EOS

and, counted apart, the top-level answers that define the problem's function again (a top-level `def` of the last
function the prompt names): the one way a top-level answer can pass, since the docstring alone is a valid body.

    python scripts/humaneval_answers.py RECORD.json [RECORD.json ...]

prints one line per record: the model, the stop sequences, pass@1 (passed / problems), and the three shapes with
the most common first lines of the top-level answers.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path


def answer_shape(generation: str) -> tuple[str, str]:
    """(shape, first non-blank line) of one answer: body / top-level / empty (module docstring)."""
    text = generation.split("```", 1)[0]  # (the harness's own filter cuts at the fence the same way)
    for line in text.splitlines():
        if line.strip():
            return ("body" if line[0] in " \t" else "top-level"), line.strip()
    return "empty", ""


def redefines(generation: str, prompt: str) -> bool:
    """Whether an answer defines the prompt's last-named function again at top level (before the fence)."""
    names = re.findall(r"^def (\w+)\(", prompt, flags=re.M)
    text = generation.split("```", 1)[0]
    return bool(names) and re.search(rf"^def {names[-1]}\(", text, flags=re.M) is not None


def summarize(record: dict) -> dict:
    """Counts of one record's answer shapes, its passes and the top-level answers' most common first words."""
    samples = record["samples"]
    shapes = collections.Counter()
    starts = collections.Counter()
    passed = redefined = 0
    for sample in samples:
        shape, first = answer_shape(sample["generation"])
        shapes[shape] += 1
        if shape == "top-level":
            starts[first.split("(")[0].split(" ")[0][:24]] += 1
            redefined += redefines(sample["generation"], sample.get("prompt", ""))
        passed += sum(v for k, v in sample["metrics"].items() if k.startswith("pass@1")) > 0
    until = record["eval_args"].get("until", "the task's own")
    return {
        "model": record["model"]["name"],
        "tau": record["tau"],
        "until": until,
        "problems": len(samples),
        "passed": passed,
        "shapes": dict(shapes),
        "top_level_redefining_the_function": redefined,
        "top_level_starts": starts.most_common(4),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+", type=Path, help="mars eval result JSON files (humaneval_instruct)")
    args = parser.parse_args(argv)
    for path in args.records:
        try:
            record = json.loads(path.read_text())
            summary = summarize(record)
        except (OSError, ValueError, KeyError) as exc:
            print(f"humaneval_answers: {path}: not a mars eval record ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 2
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
