"""The supervisor: ``run_python(program)`` runs a program in the sandboxed child and classifies what happened.

The threat model and the layers are in docs/sandbox.md.  This side spawns the child's launch stage
(``mars/evaluation/sandbox/launch_stage.py``, its text read as package data and passed with ``-c`` to ``python -I -S
-B``) in a session of its own, reads its output through a selector with a hard wall-clock deadline, keeps a few KB of
head and tail of each stream, notices exit through a pidfd, SIGKILLs the process group (and, with a dedicated uid,
every process of that uid) on timeout or exit, and removes the per-call temporary directory.  It never blocks on a
child that closes or floods its pipes.
"""

from __future__ import annotations

import json
import logging
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from mars.evaluation.sandbox import uids
from mars.evaluation.sandbox.mounts import mount_plan

log = logging.getLogger(__name__)

# Exit codes used by the child's own machinery (a program can forge them only
# to its own detriment: they are all failures).
_BLOCKED_RC = 97
_MEMORY_RC = 98
_ERROR_RC = 99

_OUTPUT_HEAD = 6 * 1024  # bytes kept from the start of each stream
_OUTPUT_TAIL = 2 * 1024  # bytes kept from the end of each stream
_CTL_LIMIT = 8 * 1024
_FSIZE_BYTES = 8 << 20
_NOFILE = 64
_KILL_GRACE_S = 3.0
_DRAIN_GRACE_S = 0.5
_REAP_GRACE_S = 5.0


_BLOCKED_IMPORTS = (
    "ctypes",
    "_ctypes",
    "_ctypes_test",
    "cffi",
    "_cffi_backend",
    "_testcapi",
    "_testinternalcapi",
    "_testbuffer",
    "_testmultiphase",
    "_testsinglephase",
    "_testclinic",
    "_testimportmultiple",
    "_xxtestfuzz",
    "_xxsubinterpreters",
    "_xxinterpchannels",
    "_interpreters",
    "_interpchannels",
    "_interpqueues",
    "_sqlite3",
    "readline",
    "_gdbm",
    "_dbm",
    "_curses",
    "_curses_panel",
    "_tkinter",
    "_multiprocessing",
    "_posixshmem",
    "_ssl",
)
# Only where RLIMIT_NPROC cannot be 1 (root without a dedicated uid).
_STRICT_EXTRA_IMPORTS = ("_posixsubprocess",)


@lru_cache(maxsize=1)
def stage_source(filename: str) -> str:
    """The text of a stage of the child program (``launch_stage.py``, ``run_stage.py``), as the child runs it.

    Kept as real modules (linted, syntax-checked, importable by the tests) and shipped as package data; run with
    ``-c`` rather than by path, so the child needs no access to the installed package's directory."""
    return resources.files("mars.evaluation.sandbox").joinpath(filename).read_text(encoding="utf-8")


@dataclass(frozen=True)
class SandboxResult:
    passed: bool  # exit code 0 within limits
    status: str  # "passed" | "failed" | "timeout" | "memory" | "blocked" | "error"
    returncode: int | None
    stdout: str  # head and tail, truncated to a few KB
    stderr: str  # head and tail, truncated to a few KB
    wall_s: float


# --------------------------------------------------------------------------
# Supervisor side
# --------------------------------------------------------------------------
_warned: set[str] = set()  # launcher warnings already logged (each is logged once per supervisor)


class _Capture:
    """Keeps the first _OUTPUT_HEAD and last _OUTPUT_TAIL bytes of a stream."""

    __slots__ = ("head", "tail", "total")

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = _OUTPUT_HEAD - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > _OUTPUT_TAIL:
                del self.tail[: len(self.tail) - _OUTPUT_TAIL]

    def text(self) -> str:
        omitted = self.total - len(self.head) - len(self.tail)
        if omitted <= 0:
            raw = bytes(self.head + self.tail)
        else:
            raw = bytes(self.head) + (f"\n...[{omitted} bytes truncated by sandbox]...\n".encode()) + bytes(self.tail)
        return raw.decode("utf-8", errors="replace")


def _rmtree(path: str) -> None:
    def onerror(func, p, _exc):
        for q in (os.path.dirname(p), p):
            try:
                os.chmod(q, 0o700)
            except OSError:
                pass
        try:
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=onerror)
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)


def _validate(program, timeout_s, memory_mb, cpu_s) -> None:
    if not isinstance(program, str):
        raise TypeError("program must be a str")
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, (int, float))
        or not math.isfinite(timeout_s)
        or timeout_s <= 0
    ):
        raise ValueError(f"timeout_s must be a positive finite number, got {timeout_s!r}")
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 32:
        raise ValueError(f"memory_mb must be an int >= 32, got {memory_mb!r}")
    if cpu_s is not None and (
        isinstance(cpu_s, bool) or not isinstance(cpu_s, (int, float)) or not math.isfinite(cpu_s) or cpu_s <= 0
    ):
        raise ValueError(f"cpu_s must be None or a positive finite number, got {cpu_s!r}")


def run_python(program: str, timeout_s: float = 5.0, memory_mb: int = 512, cpu_s: float | None = None) -> SandboxResult:
    """Run ``program`` in a sandboxed ``python -I`` child; see the module doc.

    ``timeout_s`` bounds wall-clock time (interpreter start-up included),
    ``memory_mb`` the address space (``RLIMIT_AS``), ``cpu_s`` CPU time
    (``RLIMIT_CPU``, whole seconds, rounded up; defaults to a backstop just
    above ``timeout_s``).  Never raises for anything but invalid arguments.
    """
    _validate(program, timeout_s, memory_mb, cpu_s)
    t0 = time.monotonic()
    try:
        return _run_python(program, float(timeout_s), memory_mb, cpu_s, t0)
    except Exception as exc:  # failure of the sandbox machinery itself
        log.exception("sandbox machinery failed")
        return SandboxResult(
            False, "error", None, "", f"sandbox error: {type(exc).__name__}: {exc}", time.monotonic() - t0
        )


def _run_python(program: str, timeout_s: float, memory_mb: int, cpu_s: float | None, t0: float) -> SandboxResult:
    deadline = t0 + timeout_s
    is_root = os.geteuid() == 0
    uid = gid = None
    dedicated = False
    tmpdir = None
    proc = None
    ctl_r = ctl_w = None
    try:
        if is_root:
            uid, gid, dedicated = uids.acquire_ids()
        tmpdir = os.path.realpath(tempfile.mkdtemp(prefix="mars_sbx_"))
        os.chmod(tmpdir, 0o755 if is_root else 0o700)
        prog_path = os.path.join(tmpdir, "program.py")
        with open(prog_path, "wb") as f:
            f.write(program.encode("utf-8", "surrogatepass"))
        os.chmod(prog_path, 0o644)
        work = os.path.join(tmpdir, "work")
        os.mkdir(work, 0o700)
        if is_root:
            os.chown(work, uid, gid)

        cpu_soft = max(1, math.ceil(cpu_s)) if cpu_s is not None else math.ceil(timeout_s) + 1
        nproc = 1 if (not is_root or dedicated) else 64
        rlimits = [
            ("RLIMIT_CPU", cpu_soft, cpu_soft + 1),
            ("RLIMIT_FSIZE", _FSIZE_BYTES, _FSIZE_BYTES),
            ("RLIMIT_NOFILE", _NOFILE, _NOFILE),
            ("RLIMIT_CORE", 0, 0),
            ("RLIMIT_NPROC", nproc, nproc),
        ]
        blocked = list(_BLOCKED_IMPORTS) + ([] if nproc == 1 else list(_STRICT_EXTRA_IMPORTS))

        ctl_r, ctl_w = os.pipe()
        marker = f"mars-sandbox:{os.getpid()}"
        run_env = {
            "PATH": "/usr/bin:/bin",
            "HOME": work,
            "TMPDIR": work,
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }
        run_cfg = {
            "errfd": ctl_w,
            "program": prog_path,
            "work_real": os.path.realpath(work),
            "memory_bytes": memory_mb << 20,
            "blocked_imports": blocked,
            "blocked_rc": _BLOCKED_RC,
            "memory_rc": _MEMORY_RC,
            "error_rc": _ERROR_RC,
        }
        run_argv = [
            sys.executable,
            "-I",
            "-B",
            "-c",
            stage_source("run_stage.py"),
            marker + ":run",
            json.dumps(run_cfg),
        ]
        launch_cfg = {
            "errfd": ctl_w,
            "rlimits": rlimits,
            "root": is_root,
            "uid": uid,
            "gid": gid,
            "ppid": os.getpid(),
            "work": work,
            "exe": sys.executable,
            "run_argv": run_argv,
            "env": run_env,
            "error_rc": _ERROR_RC,
            "mounts": mount_plan(tmpdir, work) if is_root else None,
        }
        argv = [
            sys.executable,
            "-I",
            "-S",
            "-B",
            "-c",
            stage_source("launch_stage.py"),
            marker + ":launch",
            json.dumps(launch_cfg),
        ]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            pass_fds=(ctl_w,),
            close_fds=True,
            start_new_session=True,
            cwd=tmpdir,
            env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
        )
        os.close(ctl_w)
        ctl_w = None
        out, err, ctl, timed_out, rc, cpu_used = _supervise(proc, ctl_r, deadline, uid if dedicated else None)
        wall = time.monotonic() - t0
        return _classify(out, err, ctl, timed_out, rc, cpu_used, cpu_soft, wall)
    finally:
        if proc is not None and proc.returncode is None:
            _emergency_kill(proc, uid if dedicated else None)
        for fd in (ctl_r, ctl_w):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if proc is not None:
            for f in (proc.stdout, proc.stderr):
                if f is not None:
                    try:
                        f.close()
                    except OSError:
                        pass
        if dedicated and uid is not None:
            if uids.sweep_uid(uid, None, 1.0):
                uids.release_ids(uid)
            else:
                log.warning("sandbox uid %d still has processes; not reusing it", uid)
        if tmpdir is not None:
            try:
                _rmtree(tmpdir)
            except Exception:  # pragma: no cover - best effort
                log.warning("could not remove sandbox directory %s", tmpdir, exc_info=True)


def _kill_tree(pid: int, pidfd: int | None, uid: int | None) -> None:
    try:
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)  # pid is ours until we reap it
    except (ProcessLookupError, PermissionError, OSError):
        pass
    try:
        os.killpg(pid, signal.SIGKILL)  # start_new_session: pgid == pid
    except (ProcessLookupError, PermissionError, OSError):
        pass
    if uid is not None:
        uids.sweep_uid(uid, exclude=pid, wait_s=1.0)


def _emergency_kill(proc: subprocess.Popen, uid: int | None) -> None:
    _kill_tree(proc.pid, None, uid)
    try:
        proc.wait(timeout=_REAP_GRACE_S)
    except Exception:  # pragma: no cover
        log.warning("could not reap sandbox child %d", proc.pid)


def _exited(pid: int) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _supervise(proc: subprocess.Popen, ctl_r: int, deadline: float, uid: int | None):
    caps = {"out": _Capture(), "err": _Capture()}
    ctl = bytearray()
    sel = selectors.DefaultSelector()
    pidfd = None
    try:
        for name, f in (("out", proc.stdout), ("err", proc.stderr)):
            fd = f.fileno()
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ, name)
        os.set_blocking(ctl_r, False)
        sel.register(ctl_r, selectors.EVENT_READ, "ctl")
        try:
            pidfd = os.pidfd_open(proc.pid)
            sel.register(pidfd, selectors.EVENT_READ, "exit")
        except (AttributeError, OSError):
            pidfd = None
        state = {"exited": False}

        def pump(timeout: float) -> None:
            for key, _mask in sel.select(max(0.0, timeout)):
                if key.data == "exit":
                    state["exited"] = True
                    sel.unregister(key.fd)
                    continue
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(key.fd)
                elif key.data == "ctl":
                    if len(ctl) < _CTL_LIMIT:
                        ctl.extend(data[: _CTL_LIMIT - len(ctl)])
                else:
                    caps[key.data].feed(data)

        def pipes_open() -> bool:
            return any(k.data != "exit" for k in sel.get_map().values())

        timed_out = False
        while not state["exited"]:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            wait = deadline - now
            if pidfd is None:
                wait = min(wait, 0.01)
            pump(wait)
            if pidfd is None and _exited(proc.pid):
                state["exited"] = True

        if not state["exited"]:
            _kill_tree(proc.pid, pidfd, uid)
            kill_deadline = time.monotonic() + _KILL_GRACE_S
            while not state["exited"] and time.monotonic() < kill_deadline:
                pump(0.05 if pidfd is not None else 0.01)
                if pidfd is None and _exited(proc.pid):
                    state["exited"] = True
        # The child is dead (a zombie, not yet reaped, so its pid/pgid cannot
        # be reused): kill whatever it may have left behind, then drain.
        _kill_tree(proc.pid, pidfd, uid)
        drain_deadline = time.monotonic() + _DRAIN_GRACE_S
        while pipes_open() and time.monotonic() < drain_deadline:
            pump(drain_deadline - time.monotonic())
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)

    rc = None
    cpu_used = 0.0
    reap_deadline = time.monotonic() + _REAP_GRACE_S
    while True:
        try:
            wpid, status, ru = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:
            break
        if wpid:
            rc = os.waitstatus_to_exitcode(status)
            proc.returncode = rc
            cpu_used = ru.ru_utime + ru.ru_stime
            break
        if time.monotonic() >= reap_deadline:
            raise RuntimeError(f"sandbox child {proc.pid} could not be reaped")
        time.sleep(0.005)
    return caps["out"].text(), caps["err"].text(), bytes(ctl), timed_out, rc, cpu_used


def _classify(
    out: str, err: str, ctl: bytes, timed_out: bool, rc: int | None, cpu_used: float, cpu_soft: int, wall: float
) -> SandboxResult:
    lines = ctl.decode("utf-8", "replace").splitlines()
    errors = [ln[2:] for ln in lines if ln.startswith("E:")]
    for ln in lines:
        if ln.startswith("W:") and ln not in _warned:
            _warned.add(ln)
            log.warning("sandbox: %s", ln[2:])
    started = "OK" in lines
    if errors:
        status = "error"
        err = "sandbox error: " + "; ".join(errors) + ("\n" + err if err else "")
    elif timed_out:
        status = "timeout"
    elif not started:
        status = "error"
        err = f"sandbox error: child did not start (exit {rc})" + ("\n" + err if err else "")
    elif rc == 0:
        status = "passed"
    elif rc == _BLOCKED_RC:
        status = "blocked"
    elif rc == _MEMORY_RC:
        status = "memory"
    elif rc == -signal.SIGXCPU or (rc == -signal.SIGKILL and cpu_used >= cpu_soft - 0.05):
        status = "timeout"
    else:
        status = "failed"
    return SandboxResult(passed=status == "passed", status=status, returncode=rc, stdout=out, stderr=err, wall_s=wall)
