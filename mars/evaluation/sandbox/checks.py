"""``run_tests(code, test)``: does ``code`` pass ``test`` in the sandbox?  The one HumanEval-style check.

Both the tiny world's humaneval scorer (mars.world.tasks.humaneval) and the paper profile's ``humaneval_instruct``
metric (mars.evaluation.tasks.hooks.sandboxed_pass_at_1) call it, so they count a pass the same way.
"""

from __future__ import annotations

import secrets

from mars.evaluation.sandbox.supervisor import run_python


def run_tests(code: str, test: str, timeout_s: float = 5.0) -> bool:
    """True when ``code`` followed by ``test`` runs to the end in the sandbox within ``timeout_s``.

    A zero exit status is not enough: a program can ``sys.exit(0)`` or ``os._exit(0)`` before its asserts run.  The
    run counts only if it prints, after the tests, a random marker drawn for this call (so the code cannot print it
    in advance).  A failure of the sandbox machinery on this program counts as a failed run, not as an error.
    """
    marker = "tests-done-" + secrets.token_hex(8)
    program = code.rstrip() + "\n\n\n" + test + f"\nprint({marker!r})\n"
    try:
        result = run_python(program, timeout_s=timeout_s)
    except Exception:  # run_python raises only for bad arguments: a failed sample, not a crashed evaluation
        return False
    return result.passed and marker in result.stdout
