"""Behavioural tests for mars.evaluation.sandbox (each asserts something observable)."""

from __future__ import annotations

import ast
import dis
import os
import socket
import sys
import threading
import time
import types
import uuid

import pytest

from mars.evaluation.sandbox import SandboxResult, run_python, run_tests, sandbox_processes, supervisor, uids

IS_ROOT = os.geteuid() == 0
root_only = pytest.mark.skipif(not IS_ROOT, reason="kernel layers need a root supervisor")

HUMANEVAL_STYLE = """
from typing import List

def has_close_elements(numbers: List[float], threshold: float) -> bool:
    for i, a in enumerate(numbers):
        for j, b in enumerate(numbers):
            if i != j and abs(a - b) < threshold:
                return True
    return False

def check(candidate):
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False

check(has_close_elements)
print("all tests passed")
"""


def _no_sandbox_processes(wait_s: float = 2.0) -> list[int]:
    deadline = time.monotonic() + wait_s
    while True:
        left = sandbox_processes()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _zombie_children() -> list[int]:
    me = str(os.getpid())
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "Z" and fields[1] == me:
            found.append(int(name))
    return found


def _assert_blocked(r: SandboxResult, event: str) -> None:
    """The audit hook refused ``event`` (its own message names it) and nothing of the sandbox is left running."""
    assert not r.passed
    assert r.status == "blocked" and r.returncode == 97, r
    assert f"[mars-sandbox] blocked: {event}" in r.stderr, r
    assert _no_sandbox_processes() == []


# --------------------------------------------------------------------------- basics
def test_correct_code_passes():
    r = run_python(HUMANEVAL_STYLE)
    assert isinstance(r, SandboxResult)
    assert r.passed and r.status == "passed" and r.returncode == 0, r
    assert r.stdout == "all tests passed\n"
    assert r.wall_s < 5


def test_failing_assert_fails():
    r = run_python(HUMANEVAL_STYLE.replace("0.05) == False", "0.05) == True"))
    assert not r.passed and r.status == "failed" and r.returncode == 1
    assert "AssertionError" in r.stderr
    assert "program.py" in r.stderr  # traceback points at the program, not the bootstrap


def test_syntax_error_fails():
    r = run_python("def f(:\n    return 1\n")
    assert not r.passed and r.status == "failed"
    assert "SyntaxError" in r.stderr


def test_nonzero_exit_code_fails():
    r = run_python("import sys; print('x'); sys.exit(3)")
    assert (r.passed, r.status, r.returncode, r.stdout) == (False, "failed", 3, "x\n")


def test_invalid_arguments_raise():
    for kwargs in (
        {"timeout_s": 0},
        {"timeout_s": -1},
        {"timeout_s": float("nan")},
        {"memory_mb": 31},
        {"memory_mb": 0},
        {"cpu_s": 0},
    ):
        with pytest.raises(ValueError):
            run_python("pass", **kwargs)


def test_machinery_failure_is_reported_as_error(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/nonexistent/python3")
    r = run_python("print(1)")
    assert r.status == "error" and not r.passed
    assert "sandbox error" in r.stderr


# --------------------------------------------------------------------------- time
def test_infinite_loop_times_out_promptly():
    t0 = time.monotonic()
    r = run_python("while True:\n    pass\n", timeout_s=1.0)
    elapsed = time.monotonic() - t0
    assert r.status == "timeout" and not r.passed
    assert 1.0 <= r.wall_s and elapsed < 1.0 + 1.5
    assert _no_sandbox_processes() == []


def test_cpu_limit_is_enforced():
    t0 = time.monotonic()
    r = run_python("while True:\n    pass\n", timeout_s=20, cpu_s=1)
    assert r.status == "timeout" and not r.passed
    assert time.monotonic() - t0 < 5  # RLIMIT_CPU fired long before the wall clock


def test_closed_pipes_and_loop_does_not_hang_caller():
    t0 = time.monotonic()
    r = run_python("import os\nos.close(1)\nos.close(2)\nwhile True:\n    pass\n", timeout_s=1.0)
    assert r.status == "timeout"
    assert time.monotonic() - t0 < 1.0 + 1.5


# --------------------------------------------------------------------------- processes
def test_fork_bomb_is_contained():
    r = run_python("import os\nwhile True:\n    os.fork()\n", timeout_s=3)
    _assert_blocked(r, "os.fork")


def test_subprocess_spawn_is_contained():
    prog = "import subprocess\nsubprocess.Popen(['sleep', '30'])\nprint('SPAWNED')\n"
    r = run_python(prog, timeout_s=3)
    _assert_blocked(r, "subprocess.Popen sleep")
    assert "SPAWNED" not in r.stdout
    r = run_python("import os\nos.system('sleep 30 &')\n", timeout_s=3)
    _assert_blocked(r, "os.system")


def test_kernel_refuses_fork_even_past_the_audit_hook():
    # _posixsubprocess.fork_exec raises no audit event; RLIMIT_NPROC=1 on a
    # uid that owns nothing else must still make fork() fail with EAGAIN.
    prog = (
        "import os, _posixsubprocess\n"
        "r, w = os.pipe()\n"
        "pid = _posixsubprocess.fork_exec([b'/bin/sleep', b'30'], [b'/bin/sleep'], True, (),"
        " None, None, -1, -1, -1, -1, -1, -1, r, w, False, True, -1, None, None, None, -1,"
        " None, False)\n"
        "print('FORKED', pid)\n"
    )
    r = run_python(prog, timeout_s=3)
    # The kernel is the layer under test: the hook lets the call through and fork fails with EAGAIN.
    assert "FORKED" not in r.stdout
    assert r.status == "failed" and "BlockingIOError" in r.stderr and "[mars-sandbox] blocked" not in r.stderr, r
    assert _no_sandbox_processes() == []


def test_threads_cannot_be_started():
    r = run_python("import threading\nt = threading.Thread(target=print)\nt.start()\n")
    assert not r.passed and "can't start new thread" in r.stderr


# --------------------------------------------------------------------------- memory
def test_huge_allocation_fails_fast_with_memory_status():
    t0 = time.monotonic()
    r = run_python("x = bytearray(20 * 2**30)\nprint('ALLOCATED')\n")
    assert r.status == "memory" and not r.passed
    assert "MemoryError" in r.stderr and "ALLOCATED" not in r.stdout
    assert time.monotonic() - t0 < 3


def test_memory_limit_is_configurable():
    prog = "x = bytearray(300 * 2**20)\nprint('ok')\n"
    assert run_python(prog, memory_mb=1024).passed
    assert run_python(prog, memory_mb=128).status == "memory"


# --------------------------------------------------------------------------- files
@pytest.mark.parametrize(
    "how",
    [
        "open({p!r}, 'w').write('pwned')",
        "import os\nos.close(os.open({p!r}, os.O_WRONLY | os.O_CREAT, 0o644))",
        "import pathlib\npathlib.Path({p!r}).write_text('pwned')",
        "import shutil\nopen('local.txt', 'w').write('x')\nshutil.copy('local.txt', {p!r})",
        "import os\nos.mkdir({p!r})",
    ],
)
def test_writes_outside_the_sandbox_are_refused(tmp_path, how):
    targets = [str(tmp_path / "evil.txt"), f"/tmp/mars_sandbox_test_{uuid.uuid4().hex}"]
    before = sorted(os.listdir(tmp_path))
    for target in targets:
        r = run_python(how.format(p=target))
        assert not r.passed and r.status in ("blocked", "failed"), (target, r)
        assert not os.path.lexists(target)
    assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize(
    "how",
    [
        "import os\nos.remove({p!r})",
        "import os\nos.rename({p!r}, 'stolen.txt')",
        "import os\nos.chmod({p!r}, 0o777)",
        "import shutil\nshutil.rmtree({d!r})",
        "open({p!r}, 'w')",  # truncation
    ],
)
def test_deleting_or_modifying_files_outside_is_refused(tmp_path, how):
    d = tmp_path / "keep"
    d.mkdir()
    sentinel = d / "sentinel.txt"
    sentinel.write_text("precious")
    os.chmod(sentinel, 0o644)
    r = run_python(how.format(p=str(sentinel), d=str(d)))
    assert not r.passed and r.status in ("blocked", "failed"), r
    assert sentinel.read_text() == "precious"
    assert stat_mode(sentinel) == 0o644 and sentinel.stat().st_uid == os.geteuid()


def stat_mode(path) -> int:
    return os.stat(path).st_mode & 0o777


def test_symlink_escape_and_chdir_are_refused(tmp_path):
    for prog in (
        f"import os\nos.symlink({str(tmp_path)!r}, 'link')\nopen('link/x', 'w')",
        "import os\nos.chdir('/tmp')\nopen('x', 'w')",
        "import os\nfd = os.open('/tmp', os.O_RDONLY)\nos.open('x', os.O_WRONLY | os.O_CREAT, dir_fd=fd)",
    ):
        r = run_python(prog)
        assert r.status == "blocked", (prog, r)
    assert list(tmp_path.iterdir()) == []


def test_working_directory_is_private_writable_and_removed():
    prog = (
        "import os, tempfile, pathlib, shutil\n"
        "open('a.txt', 'w').write('hello')\n"
        "pathlib.Path('b.txt').write_text(open('a.txt').read())\n"
        "os.makedirs('d/e')\n"
        "os.rename('b.txt', 'd/e/c.txt')\n"
        "with tempfile.TemporaryDirectory() as t:\n"
        "    open(os.path.join(t, 'f'), 'w').write('x')\n"
        "shutil.rmtree('d')\n"
        "os.remove('a.txt')\n"
        "print(os.getcwd())\n"
        "print(os.environ['HOME'] == os.getcwd(), sorted(os.listdir('.')))\n"
    )
    r = run_python(prog)
    assert r.passed, r
    cwd, rest = r.stdout.splitlines()
    assert rest == "True []"
    assert os.path.basename(cwd) == "work" and "mars_sbx_" in cwd
    assert not os.path.exists(cwd) and not os.path.exists(os.path.dirname(cwd))


def test_temp_dir_removed_after_timeout():
    r = run_python("import os\nprint(os.getcwd(), flush=True)\nwhile True:\n    pass\n", timeout_s=1)
    assert r.status == "timeout"
    cwd = r.stdout.strip()
    assert "mars_sbx_" in cwd and not os.path.exists(os.path.dirname(cwd))


@root_only
def test_unaudited_mkfifo_lands_in_private_tmp():
    # os.mkfifo raises no audit event: only the private /tmp mount contains it.
    target = f"/tmp/mars_sandbox_fifo_{uuid.uuid4().hex}"
    r = run_python(f"import os\nos.mkfifo({target!r})\nprint(os.path.exists({target!r}))")
    # The fifo exists inside the child's /tmp (a private tmpfs) and not in the host's.
    assert r.passed and r.stdout == "True\n", r
    assert not os.path.lexists(target)


# --------------------------------------------------------------------------- network
@pytest.mark.parametrize(
    "how",
    [
        "import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)",
        "import socket\ns = socket.socket()\ns.settimeout(1)\ns.connect(('127.0.0.1', {port}))",
        "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:{port}/', timeout=1)",
        "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'x', ('127.0.0.1', {port}))",
    ],
)
def test_network_is_refused_and_listener_sees_nothing(how):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        r = run_python(how.format(port=port) + "\nprint('CONNECTED')\n", timeout_s=3)
        assert not r.passed and "CONNECTED" not in r.stdout, r
        listener.settimeout(0.3)
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()


@root_only
def test_child_has_its_own_network_namespace():
    r = run_python("print(open('/proc/net/dev').read())")
    assert r.passed, r
    ifaces = [ln.split(":")[0].strip() for ln in r.stdout.splitlines()[2:] if ":" in ln]
    assert ifaces == ["lo"]


# --------------------------------------------------------------------------- secrets
def test_environment_secrets_are_not_visible(monkeypatch):
    monkeypatch.setenv("MARS_TEST_SECRET", "s3cr3t")
    prog = (
        "import os\n"
        "print(dict(os.environ))\n"
        "for p in ('/proc/self/environ', '/proc/%d/environ' % os.getppid(), '/proc/1/environ'):\n"
        "    try:\n"
        "        print(p, open(p, 'rb').read())\n"
        "    except Exception as e:\n"
        "        print(p, 'ERR', e)\n"
    )
    r = run_python(prog)
    assert "s3cr3t" not in r.stdout and "s3cr3t" not in r.stderr
    env_line, self_environ = r.stdout.splitlines()
    # The child's environment is the sandbox's own minimal dict, not a filtered copy of the caller's ...
    assert set(ast.literal_eval(env_line)) == {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "PYTHONHASHSEED",
        "PYTHONDONTWRITEBYTECODE",
        "OPENBLAS_NUM_THREADS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
    }
    assert self_environ.startswith("/proc/self/environ b'PATH=/usr/bin:/bin")
    # ... and reading the supervisor's environment ends the program (it never gets to print it).
    assert r.status == "blocked" and f"/proc/{os.getpid()}/environ (another process)" in r.stderr, r


@root_only
def test_privileges_are_dropped(tmp_path):
    secret = tmp_path / "root_only.txt"
    secret.write_text("top secret")
    os.chmod(secret, 0o600)
    prog = (
        "import os\n"
        "print(os.getuid(), os.getgid(), os.getgroups())\n"
        f"try:\n    print(open({str(secret)!r}).read())\nexcept OSError as e:\n    print('denied')\n"
        "try:\n    print(sorted(os.listdir('/root')))\nexcept OSError:\n    print('no /root')\n"
    )
    r = run_python(prog)
    assert r.passed, r
    ids, denied, root_listing = r.stdout.splitlines()
    uid, gid, groups = ids.split(" ", 2)
    assert int(uid) != 0 and int(gid) != 0 and groups == "[]"
    assert denied == "denied" and "top secret" not in r.stdout
    if root_listing != "no /root":  # /root is replaced by an (almost) empty tmpfs
        assert set(ast.literal_eval(root_listing)) <= {".pyenv"}


# --------------------------------------------------------------------------- in-process layer
def test_ctypes_is_refused_but_optional_imports_degrade():
    r = run_python("import ctypes\nprint(ctypes.CDLL(None).getpid())")
    assert r.status == "blocked"
    r = run_python("try:\n    import ctypes\nexcept ImportError:\n    ctypes = None\nprint(ctypes is None)")
    assert r.passed and r.stdout == "True\n"


def test_audit_hook_survives_tampering(tmp_path):
    target = str(tmp_path / "escape.txt")
    attempts = [
        # builtins and mutable stdlib types the hook might depend on
        "import builtins, os\nbuiltins.len = lambda x: 0\nbuiltins.type = lambda x: str\n"
        "os.stat_result.__getitem__ = lambda s, i: 0\nopen({t!r}, 'w')",
        # swapping sys.modules to get past the import refusal
        "import sys\nsys.modules = dict(sys.modules)\nimport ctypes\nprint('LOADED')",
        # loading the extension directly through importlib
        "import importlib.util\nspec = importlib.util.find_spec('_ctypes')\n"
        "importlib.util.module_from_spec(spec)\nprint('LOADED')",
        # crafting code objects, walking the heap
        "def f(): pass\nf.__code__ = f.__code__.replace(co_consts=(None,))",
        "import gc\nprint(len(gc.get_objects()))",
        # sub-interpreters start without audit hooks
        "import _xxsubinterpreters as s\nprint(s.create())",
    ]
    for prog in attempts:
        r = run_python(prog.format(t=target))
        assert not r.passed and r.status == "blocked", (prog, r)
        assert "LOADED" not in r.stdout
    assert not os.path.exists(target)


def test_hook_functions_do_no_global_or_closure_lookups():
    # Everything the audit hook uses must be bound at installation (positional
    # defaults), so that user code cannot influence it via builtins/globals
    # or writable closure cells.
    ns = {"__name__": "not_main"}
    exec(compile(supervisor.stage_source("run_stage.py"), "<run_stage>", "exec"), ns)
    nested = [
        c for c in ns["_install_hook"].__code__.co_consts if isinstance(c, types.CodeType) and c.co_name != "<genexpr>"
    ]
    assert {c.co_name for c in nested} >= {"hook", "hook_impl", "on_open", "realpath", "deny"}
    forbidden = {
        "LOAD_GLOBAL",
        "LOAD_NAME",
        "LOAD_DEREF",
        "LOAD_CLOSURE",
        "STORE_DEREF",
        "STORE_GLOBAL",
        "LOAD_CLASSDEREF",
    }
    for c in nested:
        assert not c.co_freevars and not c.co_cellvars, c.co_name
        used = {i.opname for i in dis.get_instructions(c)} & forbidden
        assert not used, (c.co_name, used)


def test_numpy_programs_work_if_numpy_is_installed():
    probe = run_python("import importlib.util\nprint(importlib.util.find_spec('numpy') is not None)")
    if probe.stdout.strip() != "True":
        pytest.skip("numpy is not importable by the sandboxed interpreter")
    r = run_python("import numpy as np\nassert int(np.arange(10).sum()) == 45\nprint('ok')")
    assert r.passed, r


# --------------------------------------------------------------------------- output
def test_stdout_flood_is_truncated_and_call_returns():
    prog = (
        "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(100):\n"
        "    sys.stdout.write(chunk)\nsys.stdout.write('END')\n"
    )
    t0 = time.monotonic()
    r = run_python(prog, timeout_s=20)
    assert time.monotonic() - t0 < 15
    assert r.passed, r.status
    assert len(r.stdout) < 16 * 1024
    assert r.stdout.startswith("xxxx") and r.stdout.endswith("END")
    assert "truncated" in r.stdout


def test_endless_output_times_out():
    r = run_python("while True:\n    print('y' * 1000)\n", timeout_s=1)
    assert r.status == "timeout" and len(r.stdout) < 16 * 1024


# --------------------------------------------------------------------------- hygiene
def test_sequential_runs_leak_no_fds_or_zombies():
    fds_before = len(os.listdir("/proc/self/fd"))
    threads_before = threading.active_count()
    for i in range(20):
        r = run_python(f"print({i} * 2)")
        assert r.passed and r.stdout == f"{i * 2}\n", r
    assert len(os.listdir("/proc/self/fd")) == fds_before
    assert threading.active_count() == threads_before
    assert _zombie_children() == []
    assert _no_sandbox_processes() == []


def test_concurrent_calls_from_threads():
    results: list[SandboxResult] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        for j in range(3):
            r = run_python(f"import os\nprint({k}, {j}, os.getuid())")
            with lock:
                results.append(r)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(results) == 12 and all(r.passed for r in results), results
    if IS_ROOT:
        uids = {r.stdout.split()[2] for r in results}
        assert "0" not in uids
    assert _no_sandbox_processes() == []


def test_polling_fallback_without_pidfd(monkeypatch):
    def no_pidfd(pid):
        raise OSError("pidfd_open unavailable")

    monkeypatch.setattr(supervisor.os, "pidfd_open", no_pidfd)
    assert run_python("print('ok')").stdout == "ok\n"
    t0 = time.monotonic()
    assert run_python("while True:\n    pass\n", timeout_s=1).status == "timeout"
    assert time.monotonic() - t0 < 2.5
    assert _no_sandbox_processes() == []


@root_only
def test_nobody_fallback_when_dedicated_uids_are_unavailable(monkeypatch):
    monkeypatch.setattr(uids, "dedicated_uids_possible", lambda: False)
    r = run_python("import os\nprint(os.getuid())")
    assert r.passed and r.stdout.strip() == str(uids.NOBODY), r
    _assert_blocked(run_python("import os\nwhile True:\n    os.fork()\n"), "os.fork")
    # RLIMIT_NPROC cannot be 1 on a shared uid, so the unaudited fork path is
    # closed at import time instead.
    r = run_python("import _posixsubprocess\nprint('LOADED')")
    assert r.status == "blocked" and "LOADED" not in r.stdout


# --------------------------------------------------------------------------- run_tests (HumanEval scoring)
def test_run_tests_passes_only_code_that_satisfies_its_tests():
    code = "def add(a, b):\n    return a + b\n"
    assert run_tests(code, "assert add(2, 3) == 5") is True
    assert run_tests(code, "assert add(2, 3) == 6") is False
    assert run_tests("def add(a, b) return a", "assert add(2, 3) == 5") is False  # syntax error
    assert run_tests("while True:\n    pass\n", "assert True", timeout_s=1) is False


def test_run_tests_refuses_an_exit_before_the_tests():
    # Each of these exits 0 (a "passed" run_python) without ever running the assert that would fail.
    for cheat in ("import sys\nsys.exit(0)", "import os\nos._exit(0)", "raise SystemExit"):
        assert run_python(cheat + "\nassert False\n").passed
        assert run_tests(cheat, "assert False") is False
    # Printing something that looks like the marker does not help either: it is drawn per call.
    assert run_tests("print('tests-done-0123456789abcdef')\nimport sys\nsys.exit(0)", "assert False") is False


def test_paper_humaneval_metric_is_the_mean_of_run_tests():
    from mars.evaluation.tasks.hooks import sandboxed_pass_at_1

    refs = ["assert f() == 1", "assert f() == 1", "assert f() == 1", "assert f() == 1"]
    preds = [["def f():\n    return 1\n"], ["def f():\n    return 2\n"], ["import sys\nsys.exit(0)\n"], []]
    assert sandboxed_pass_at_1(refs, preds) == {"pass@1": 0.25}
    assert sandboxed_pass_at_1([], []) == {"pass@1": 0.0}
