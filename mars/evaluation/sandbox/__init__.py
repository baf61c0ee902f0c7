"""Run untrusted, model-generated Python programs in a constrained subprocess (threat model: docs/sandbox.md).

    run_python(program, timeout_s, memory_mb, cpu_s) -> SandboxResult   one program; raises only for bad arguments
    run_tests(code, test, timeout_s) -> bool                           code + its tests passed (HumanEval scoring)
    sandbox_processes() -> list[int]                                   live processes of this supervisor's sandboxes

Modules: ``supervisor`` (spawning, supervision, classification); ``launch_stage.py`` and ``run_stage.py`` (the two
stages of the program the child runs, kept as package data); ``uids`` (dedicated per-call uids and their
processes); ``mounts`` (the child's private mount plan); ``checks`` (``run_tests``).
"""

from mars.evaluation.sandbox.checks import run_tests
from mars.evaluation.sandbox.supervisor import SandboxResult, run_python
from mars.evaluation.sandbox.uids import sandbox_processes

__all__ = ["SandboxResult", "run_python", "run_tests", "sandbox_processes"]
