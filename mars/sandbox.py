"""Run untrusted, model-generated Python programs in a constrained subprocess.

``run_python(program)`` executes ``program`` in a fresh ``python -I`` child of
the current interpreter and reports what happened as a :class:`SandboxResult`.
It is meant for executing HumanEval-style completions + tests, i.e. code that
is usually benign but may be buggy (infinite loops, huge allocations, output
floods) or occasionally hostile (``os.system("rm -rf ~")``, fork bombs,
exfiltration attempts).

Threat model
============
The adversary is the *program text*: it may try to (a) consume unbounded wall
time, CPU, memory, disk, processes or file descriptors, (b) outlive the call
(daemonise, fork), (c) modify or delete files outside its scratch directory,
(d) talk to the network, (e) read secrets of the evaluating process
(environment variables, ``/proc/<ppid>/environ``), or (f) lie about passing by
forging output.  The caller, the Python installation and the kernel are
trusted.

Layers (outermost first)
------------------------
1. **Supervisor (parent side).**  The child is spawned with
   ``start_new_session=True`` (own session and process group) and *without*
   ``preexec_fn`` (safe in multi-threaded callers).  The parent reads
   stdout/stderr through a selector with a hard wall-clock deadline, keeps only
   the head and tail of each stream (a few KB), notices exit through a pidfd,
   and on timeout or exit SIGKILLs the pidfd, the whole process group and --
   when a dedicated uid is used -- every process of that uid, then reaps the
   child with ``wait4``.  It never blocks on a child that closes or floods its
   pipes.  The per-call temporary directory is removed in a ``finally``.
2. **Launcher stage (kernel-enforced, in the child before the program's
   interpreter starts).**  A tiny ``python -I -S`` stage sets rlimits
   (``RLIMIT_CPU``, ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``, ``RLIMIT_CORE=0``,
   ``RLIMIT_NPROC``) and, when running as root:

   * ``unshare(CLONE_NEWNS | CLONE_NEWNET)``: a fresh network namespace with
     only a down loopback interface (no network at all, not even 127.0.0.1 of
     the host), and a private mount namespace (propagation made ``rprivate``
     first, so nothing leaks back to the host) in which
     - world-writable directories (``/tmp``, ``/var/tmp``, ``/dev/shm``,
       ``/run/lock``) are replaced by tiny private tmpfs instances,
     - directories the unprivileged uid could not traverse but the
       interpreter lives in (e.g. ``/root`` for a pyenv install) are replaced
       by an empty read-only tmpfs with only the interpreter prefix
       bind-mounted back read-only (this also hides the rest of ``/root``),
     - the working directory is a size- and inode-limited ``noexec`` tmpfs;
   * privileges are dropped (``setgroups([])``, ``setresgid``,
     ``setresuid``) to a **dedicated, per-call uid/gid** (a range starting at
     2**30, unique per supervisor pid and concurrent call; falls back to
     ``nobody`` if the uid map does not allow it).  With a uid that owns no
     other process ``RLIMIT_NPROC=1`` makes ``fork``/``clone`` (and thus
     threads) fail in the kernel, regardless of how they are invoked.  As a
     non-root caller the child keeps the caller's uid, and ``RLIMIT_NPROC=1``
     has the same effect (it counts all processes of the uid).
   * ``PR_SET_NO_NEW_PRIVS`` (no privilege gain through setuid binaries) and
     ``PR_SET_PDEATHSIG=SIGKILL`` (the child dies with its supervisor).
   The environment is replaced by a minimal dict; the caller's environment is
   never passed on.  ``/proc/<ppid>/environ`` of a root supervisor is not
   readable by the dropped uid.
3. **Run stage (in-interpreter, CPython audit hook).**  The program runs in
   ``python -I -B`` after a bootstrap that sets ``RLIMIT_AS`` (so a 20 GB
   allocation raises ``MemoryError`` at once), installs a ``sys.addaudithook``
   hook, and ``exec``s the compiled program as ``__main__`` with stdin
   ``/dev/null``.  Audit hooks cannot be removed from Python code.  The hook
   depends only on values bound at installation as positional defaults (no
   closures, module globals or builtins lookups, no calls into objects the
   program controls), only immutable objects are reachable from its frames
   (which a Python signal handler can inspect while it runs), rebinding the
   ``__code__``/``__defaults__`` of its functions is refused, ``gc`` heap
   walking is refused, and it never raises (an unexpected exception inside it
   ends the process), so no frame of it leaks into a traceback.  The hook
   terminates the process (status ``"blocked"``) on:
   process creation (``os.fork/forkpty/exec*/posix_spawn*/system``,
   ``subprocess.Popen``, ``pty.spawn``), network use (``socket.connect/bind/
   sendto/sendmsg/getaddrinfo/gethostby*``, non-``AF_UNIX`` sockets),
   ``ctypes.*``, sub-interpreters, ``code.__new__``, ``gc`` introspection,
   signals to other processes, ``syslog``, any file write/creation/removal/
   rename/chmod/chown/utime/xattr/truncate whose *resolved* target (symlinks,
   ``..``, ``dir_fd`` and fd arguments are resolved) is outside the private
   working directory (``/dev/null`` excepted), creating links/symlinks,
   ``chdir``, opening directories outside the working directory (so no
   ``dir_fd`` can point outside) and reading ``/proc/<pid>/...`` of any other
   process.  Imports of native modules that give raw memory access or do file
   I/O behind Python's back (``ctypes``/``_ctypes``, ``cffi``, ``_testcapi``
   and friends, sub-interpreter modules, ``_sqlite3``, ``readline``,
   ``_gdbm``/``_dbm``, ``_multiprocessing``, ``_posixshmem``, ``_ssl``, ...)
   fail with ``ModuleNotFoundError`` (the hook puts ``None`` into
   ``sys.modules``, so optional imports such as numpy's ``import ctypes``
   degrade gracefully; uncaught, the status is ``"blocked"``); actually
   loading such an extension by any route (e.g. through ``importlib`` loaders
   with a swapped ``sys.modules``) ends the process.
   The bootstrap ends the process with ``os._exit`` so interpreter
   finalisation (where audit hooks are torn down) never runs user code.

Statuses: ``passed`` (exit code 0 in time), ``failed`` (non-zero exit,
uncaught exception, syntax error, crash), ``timeout`` (wall clock or
``RLIMIT_CPU``), ``memory`` (uncaught ``MemoryError``), ``blocked`` (the
sandbox refused an operation), ``error`` (the sandbox machinery itself failed;
the program may not have run).

What this does NOT defend against
=================================
This is defence in depth for evaluation hygiene, **not a security boundary
against a determined attacker**:

* Kernel exploits, and CPython memory-corruption bugs: crafted bytecode (e.g.
  via ``marshal``/``.pyc`` or assigning ``__code__``), or out-of-bounds memory
  access through allowed native extensions (numpy's ``as_strided``, ...) can
  disable the audit hook.  The kernel layers (uid, namespaces, rlimits)
  then still apply, but only when the supervisor runs as root.
* As a non-root caller there is no privilege drop and no namespace: the
  program can read every file the caller can read, and the few unaudited
  file-creating calls (``os.mkfifo``, ``os.mknod``) are not contained.
* Reading world-readable files (system files, the project tree) is allowed;
  other processes are visible in ``/proc`` (their files are refused by the
  hook).  There is no PID namespace, no seccomp filter, no cgroup (memory is
  bounded by ``RLIMIT_AS`` per process, not by a cgroup).
* Without namespaces (``unshare`` refused, e.g. in unprivileged containers)
  network isolation rests on the audit hook alone; a warning is logged.
* Threads cannot be started where ``RLIMIT_NPROC=1`` applies (dedicated uid
  or non-root); hook checks are therefore race free.  In the ``nobody``
  fallback they can, and a check-then-use race with a second thread is
  conceivable (``_posixsubprocess`` is refused there as well).
* ``sys.exit(0)`` / ``os._exit(0)`` before the tests run "passes": the caller
  must construct programs so that a zero exit code means what it wants (e.g.
  check a sentinel printed after the assertions).
* With ``-I`` the child ignores ``PYTHONHASHSEED``/``PYTHONDONTWRITEBYTECODE``
  from its environment (they are still set); ``-B`` is passed explicitly, hash
  randomisation stays on.
"""

from __future__ import annotations

import json
import logging
import math
import os
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import lru_cache

__all__ = ["SandboxResult", "run_python", "sandbox_processes"]

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
_WORK_TMPFS_KB = 32 * 1024
_WORK_TMPFS_INODES = 2048
_KILL_GRACE_S = 3.0
_DRAIN_GRACE_S = 0.5
_REAP_GRACE_S = 5.0

# Dedicated sandbox uids: _UID_BASE + (supervisor pid % _PID_SLOTS) * _SLOTS + i
_UID_BASE = 1 << 30
_PID_SLOTS = 1 << 22  # >= the largest possible pid_max
_SLOTS_PER_PID = 64
_UID_SPAN = _PID_SLOTS * _SLOTS_PER_PID
_NOBODY = 65534

_PRIVATE_TMP_CANDIDATES = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")

_BLOCKED_IMPORTS = (
    "ctypes", "_ctypes", "_ctypes_test", "cffi", "_cffi_backend",
    "_testcapi", "_testinternalcapi", "_testbuffer", "_testmultiphase",
    "_testsinglephase", "_testclinic", "_testimportmultiple", "_xxtestfuzz",
    "_xxsubinterpreters", "_xxinterpchannels", "_interpreters",
    "_interpchannels", "_interpqueues",
    "_sqlite3", "readline", "_gdbm", "_dbm", "_curses", "_curses_panel",
    "_tkinter", "_multiprocessing", "_posixshmem", "_ssl",
)
# Only where RLIMIT_NPROC cannot be 1 (root without a dedicated uid).
_STRICT_EXTRA_IMPORTS = ("_posixsubprocess",)


@dataclass(frozen=True)
class SandboxResult:
    passed: bool  # exit code 0 within limits
    status: str  # "passed" | "failed" | "timeout" | "memory" | "blocked" | "error"
    returncode: int | None
    stdout: str  # head and tail, truncated to a few KB
    stderr: str  # head and tail, truncated to a few KB
    wall_s: float


# --------------------------------------------------------------------------
# Code that runs inside the child (both stages).  Passed with ``-c``.
# --------------------------------------------------------------------------
_CHILD_SOURCE = r'''
import sys, os, json

def _fail(errfd, msg, rc):
    try:
        os.write(errfd, ("E:" + msg + "\n").encode("utf-8", "replace"))
    except BaseException:
        pass
    os._exit(rc)


def _namespaces(cfg, libc, ctypes, warn):
    CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
    MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
    libc.unshare.argtypes = [ctypes.c_int]
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                           ctypes.c_ulong, ctypes.c_char_p]

    def enc(s):
        return None if s is None else os.fsencode(s)

    def mount(src, dst, fstype, flags, data):
        if libc.mount(enc(src), enc(dst), enc(fstype), flags, enc(data)) != 0:
            e = ctypes.get_errno()
            raise OSError(e, "mount %s on %s: %s" % (src, dst, os.strerror(e)))

    if libc.unshare(CLONE_NEWNS | CLONE_NEWNET) == 0:
        ns_ok = net_ok = True
    else:
        ns_ok = libc.unshare(CLONE_NEWNS) == 0
        net_ok = libc.unshare(CLONE_NEWNET) == 0
    if not net_ok:
        warn("no network namespace (unshare: %s); relying on the audit hook"
             % os.strerror(ctypes.get_errno()))
    if not ns_ok:
        warn("no mount namespace (unshare: %s)" % os.strerror(ctypes.get_errno()))
        return
    try:
        mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    except OSError as e:
        warn("cannot make mounts private (%s); skipping mount isolation" % e)
        return
    plan = cfg["mounts"]
    os.umask(0o022)
    fds = {}
    for p in plan["binds"]:
        fds[p] = os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    active = []
    for path, kind in plan["overlays"]:
        if kind == "hide":
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                  "mode=0755,size=64k,nr_inodes=512")
            active.append(path)
        else:
            try:
                mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                      "mode=1777,size=1m,nr_inodes=128")
                active.append(path)
            except OSError as e:
                warn("private %s unavailable: %s" % (path, e))

    def under(p, o):
        return p == o or p.startswith(o.rstrip("/") + "/")

    tmpdir = plan["tmpdir"]
    tmpdir_bound = False
    for p in plan["binds"]:
        if not any(under(p, o) for o in active):
            continue  # the overlay it would live under is not there
        os.makedirs(p, exist_ok=True)
        mount("/proc/self/fd/%d" % fds[p], p, None, MS_BIND | MS_REC, None)
        if p == tmpdir:
            tmpdir_bound = True
            continue
        try:
            mount(None, p, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
        except OSError as e:
            warn("read-only remount of %s failed: %s" % (p, e))
    for fd in fds.values():
        os.close(fd)
    work_tmpfs = False
    try:
        mount("tmpfs", plan["work"], "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
              "size=%dk,nr_inodes=%d,mode=0700,uid=%d,gid=%d" % (
                  plan["work_kb"], plan["work_inodes"], cfg["uid"], cfg["gid"]))
        work_tmpfs = True
    except OSError as e:
        warn("work tmpfs unavailable (%s); using the host directory" % e)
    if tmpdir_bound and work_tmpfs:
        try:
            mount(None, tmpdir, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
        except OSError as e:
            warn("read-only remount of %s failed: %s" % (tmpdir, e))
    for path, kind in plan["overlays"]:
        if kind == "hide" and path in active:
            try:
                mount(None, path, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
            except OSError as e:
                warn("read-only remount of %s failed: %s" % (path, e))


def _launch(cfg):
    errfd = cfg["errfd"]

    def warn(msg):
        try:
            os.write(errfd, ("W:" + msg + "\n").encode("utf-8", "replace"))
        except OSError:
            pass

    try:
        import resource
        for name, soft, hard in cfg["rlimits"]:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        libc = ctypes = None
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
        except BaseException as e:
            if cfg["root"]:
                raise
            warn("ctypes unavailable in launcher: %r" % (e,))
        if cfg["root"]:
            _namespaces(cfg, libc, ctypes, warn)
            uid, gid = cfg["uid"], cfg["gid"]
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            if (os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid)
                    or os.getgroups()):
                raise RuntimeError("privilege drop did not take effect")
            try:
                os.setuid(0)
            except PermissionError:
                pass
            else:
                raise RuntimeError("could regain root after dropping privileges")
        if libc is not None:
            if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
                warn("PR_SET_NO_NEW_PRIVS failed")
            if libc.prctl(1, 9, 0, 0, 0) != 0:  # PR_SET_PDEATHSIG, SIGKILL
                warn("PR_SET_PDEATHSIG failed")
        if os.getppid() != cfg["ppid"]:
            _fail(errfd, "launcher: supervisor went away", cfg["error_rc"])
        os.umask(0o077)
        os.chdir(cfg["work"])
        os.execve(cfg["exe"], cfg["run_argv"], cfg["env"])
    except BaseException as e:
        _fail(errfd, "launcher: %s: %s" % (type(e).__name__, e), cfg["error_rc"])


def _install_hook(cfg):
    # Hardening rules for everything below (the hook must survive hostile code
    # running in the same interpreter, including Python signal handlers that
    # can inspect the hook's frames while it runs):
    #  * no closures and no global/builtin lookups: every dependency is a
    #    positional default (``__kwdefaults__`` would be a mutable dict);
    #  * only immutable values are reachable from the hook's frames (str,
    #    int, tuple, frozenset, builtin functions, the hook functions, whose
    #    ``__code__``/``__defaults__`` cannot be reassigned: that is audited
    #    and refused below);
    #  * no calls into objects the program controls (type checks with
    #    ``type(x) is str``; ``tuple.__getitem__`` instead of the attributes of
    #    the mutable ``os.stat_result`` type);
    #  * the hook never raises: blocked imports are refused by putting None
    #    into the original ``sys.modules``; anything unexpected ends the process.
    import posix, io
    work = cfg["work_real"]
    flushes = tuple((type(s).flush, s) for s in (sys.stdout, sys.stderr)
                    if type(s) is io.TextIOWrapper)
    WFLAGS = (posix.O_WRONLY | posix.O_RDWR | posix.O_CREAT | posix.O_TRUNC
              | posix.O_APPEND | getattr(posix, "O_TMPFILE", 0))
    FDOBJ = "<fd>"  # resolution of a descriptor that is not a file (pipe, socket)

    def deny(event, what="", _flushes=flushes, _write=posix.write, _exit=posix._exit,
             _rc=cfg["blocked_rc"], _BE=BaseException):
        for fl, s in _flushes:
            try:
                fl(s)
            except _BE:
                pass
        try:
            msg = "\n[mars-sandbox] blocked: " + event
            if what:
                msg = msg + " " + what[:300]
            _write(2, (msg + "\n").encode("utf-8", "backslashreplace"))
        except _BE:
            pass
        _exit(_rc)

    def as_text(p, _type=type, _str=str, _bytes=bytes, _BE=BaseException):
        t = _type(p)
        if t is _str:
            return p
        if t is _bytes:
            try:
                return p.decode("utf-8", "surrogateescape")
            except _BE:
                return None
        return None

    def realpath(path, _lstat=posix.lstat, _readlink=posix.readlink, _tuple=tuple,
                 _len=len, _tget=tuple.__getitem__, _OSError=OSError, _ValueError=ValueError):
        # ``path`` is absolute.  Resolve symlinks component by component as
        # the kernel does; components that do not exist are kept lexically.
        parts = _tuple(path.split("/"))
        i = 0
        res = ""
        hops = 0
        while i < _len(parts):
            name = parts[i]
            i = i + 1
            if not name or name == ".":
                continue
            if name == "..":
                j = res.rfind("/")
                res = res[:j] if j > 0 else ""
                continue
            cand = res + "/" + name
            try:
                mode = _tget(_lstat(cand), 0)
            except _OSError:
                res = cand
                continue
            except _ValueError:
                return None
            if (mode & 0o170000) == 0o120000:
                hops = hops + 1
                if hops > 40:
                    return None
                try:
                    target = _readlink(cand)
                except _OSError:
                    return None
                if target.startswith("/"):
                    res = ""
                parts = _tuple(target.split("/")) + parts[i:]
                i = 0
            else:
                res = cand
        return res or "/"

    def fd_target(fd, _readlink=posix.readlink, _str=str, _OSError=OSError):
        try:
            return _readlink("/proc/self/fd/" + _str(fd))
        except _OSError:
            return None

    def resolve(p, dir_fd=None, _type=type, _int=int, _bool=bool, _as_text=as_text,
                _realpath=realpath, _fd_target=fd_target, _getcwd=posix.getcwd,
                _OSError=OSError, _FDOBJ=FDOBJ):
        t = _type(p)
        if t is _int or t is _bool:
            target = _fd_target(p)
            if target is None:
                return None
            if not target.startswith("/"):
                return _FDOBJ
            return _realpath(target)
        s = _as_text(p)
        if s is None:
            return None
        if not s.startswith("/"):
            if _type(dir_fd) is _int and dir_fd >= 0:
                base = _fd_target(dir_fd)
                if base is None or not base.startswith("/"):
                    return None
            else:
                try:
                    base = _getcwd()
                except _OSError:
                    return None
            s = base + "/" + s
        return _realpath(s)

    def check_mut(event, p, dir_fd=None, _resolve=resolve, _deny=deny, _as_text=as_text,
                  _ws=work + "/", _FDOBJ=FDOBJ):
        rp = _resolve(p, dir_fd)
        if rp is None or not (rp == _FDOBJ or rp.startswith(_ws)):
            _deny(event, _as_text(p) or "")

    def on_open(args, _type=type, _int=int, _bool=bool, _str=str, _len=len,
                _resolve=resolve, _deny=deny, _as_text=as_text, _stat=posix.stat,
                _tget=tuple.__getitem__, _BE=BaseException, _work=work, _ws=work + "/",
                _wflags=WFLAGS, _pid=str(posix.getpid())):
        if _len(args) < 3:
            _deny("open")
        p = args[0]
        tp = _type(p)
        if tp is _int or tp is _bool:
            return  # wraps an already-open descriptor
        rp = _resolve(p)
        if rp is None:
            _deny("open", _as_text(p) or "")
        flags = args[2]
        mode = args[1]
        write = _type(flags) is _int and (flags & _wflags) != 0
        if not write and _type(mode) is _str:
            write = "w" in mode or "a" in mode or "x" in mode or "+" in mode
        if write:
            if rp.startswith(_ws) or rp == "/dev/null":
                return
            _deny("open", rp + " (write outside the sandbox directory)")
        if rp == _work or rp.startswith(_ws):
            return
        if rp.startswith("/proc/"):
            comp = rp[6:].partition("/")[0]
            if comp.isdigit() and comp != _pid:
                _deny("open", rp + " (another process)")
        try:
            mode_bits = _tget(_stat(rp), 0)
        except _BE:
            return
        if (mode_bits & 0o170000) == 0o040000:
            _deny("open", rp + " (directory outside the sandbox directory)")

    def on_import(args, _type=type, _str=str, _len=len, _deny=deny,
                  _blocked=frozenset(cfg["blocked_imports"]), _modules=sys.modules,
                  _setitem=dict.__setitem__):
        name = args[0] if _len(args) else None
        if _type(name) is not _str:
            _deny("import")
        hit = name in _blocked or name.rpartition(".")[2] in _blocked
        fn = args[1] if _len(args) > 1 else None
        if fn is not None:
            # An extension module is about to be loaded from ``fn``.
            if _type(fn) is not _str:
                _deny("import", name)
            if hit or fn.rpartition("/")[2].partition(".")[0] in _blocked:
                _deny("import", name + " (" + fn + ")")
            return
        if hit:
            # importlib then raises ModuleNotFoundError("import of X halted;
            # None in sys.modules"), a plain ImportError for the program.
            _setitem(_modules, name, None)

    def pid_ok(args, _type=type, _int=int, _len=len, _pid=posix.getpid()):
        pid = args[0] if _len(args) else None
        return _type(pid) is _int and (pid == _pid or pid == 0)

    ev_deny = frozenset((
        "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.system", "os.spawn",
        "os.startfile", "subprocess.Popen", "pty.spawn", "os.link", "os.symlink",
        "os.killpg", "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg",
        "socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr",
        "socket.getnameinfo", "socket.sethostname", "http.client.connect",
        "ftplib.connect", "smtplib.connect", "poplib.connect", "imaplib.open",
        "nntplib.connect", "telnetlib.Telnet.open", "webbrowser.open",
        "ensurepip.bootstrap", "syslog.openlog", "syslog.syslog", "sqlite3.connect",
        "sqlite3.enable_load_extension", "sqlite3.load_extension",
        "cpython.PyInterpreterState_New", "cpython._PySys_ClearAuditHooks",
        "code.__new__", "gc.get_objects", "gc.get_referrers", "gc.get_referents"))
    ev_mut_d1 = frozenset(("os.remove", "os.rmdir"))          # (path, dir_fd)
    ev_mut_d2 = frozenset(("os.mkdir", "os.chmod"))           # (path, mode, dir_fd)
    ev_mut_d3 = frozenset(("os.chown", "os.utime"))           # (path, a, b, dir_fd)
    ev_mut = frozenset(("os.truncate", "os.setxattr", "os.removexattr"))  # (path, ...)
    ev_opt1 = frozenset(("shutil.copyfile", "shutil.copymode", "shutil.copystat",
                         "shutil.copytree", "shutil.unpack_archive"))    # check args[1]
    ev_opt0 = frozenset(("shutil.rmtree",))                               # check args[0]
    ev_attr = frozenset(("object.__setattr__", "object.__delattr__"))
    ev_all = (ev_deny | ev_mut_d1 | ev_mut_d2 | ev_mut_d3 | ev_mut | ev_opt1 | ev_opt0 | ev_attr
              | frozenset(("open", "import", "os.rename", "shutil.move", "os.chdir",
                           "os.kill", "socket.__new__", "resource.prlimit")))

    def first_text(args, _type=type, _str=str, _len=len):
        if _len(args) and _type(args[0]) is _str:
            return args[0]
        return ""

    def hook_impl(event, args, _protected, _type=type, _str=str, _bytes=bytes, _int=int,
                  _tuple=tuple, _len=len, _id=id, _all=ev_all, _evdeny=ev_deny,
                  _d1=ev_mut_d1, _d2=ev_mut_d2, _d3=ev_mut_d3, _m=ev_mut, _o1=ev_opt1,
                  _o0=ev_opt0, _attr=ev_attr, _deny=deny, _on_open=on_open,
                  _on_import=on_import, _check=check_mut, _resolve=resolve,
                  _first=first_text, _pid_ok=pid_ok, _work=work):
        if _type(event) is not _str:
            return
        if event not in _all:
            if event.startswith("ctypes."):
                _deny(event)
            return
        if _type(args) is not _tuple:
            _deny(event)
        n = _len(args)
        if event == "open":
            _on_open(args)
        elif event in _attr:
            if n and _id(args[0]) in _protected:
                _deny(event, "(the sandbox hook cannot be modified)")
        elif event == "import":
            _on_import(args)
        elif event in _evdeny:
            _deny(event, _first(args))
        elif event in _d1:
            _check(event, args[0], args[1] if n > 1 else None)
        elif event in _d2:
            _check(event, args[0], args[2] if n > 2 else None)
        elif event in _d3:
            _check(event, args[0], args[3] if n > 3 else None)
        elif event in _m:
            _check(event, args[0])
        elif event == "os.rename":
            if n < 4:
                _deny(event)
            _check(event, args[0], args[2])
            _check(event, args[1], args[3])
        elif event == "shutil.move" or event in _o1 or event in _o0:
            idx = (0, 1) if event == "shutil.move" else ((1,) if event in _o1 else (0,))
            for i in idx:
                if i < n:
                    t = _type(args[i])
                    if t is _str or t is _bytes:
                        _check(event, args[i])
                    # other path-likes: the underlying os/open events are checked
        elif event == "os.chdir":
            if not n or _resolve(args[0]) != _work:
                _deny(event, _first(args))
        elif event == "os.kill" or event == "resource.prlimit":
            if not _pid_ok(args):
                _deny(event)
        elif event == "socket.__new__":
            fam = args[1] if n > 1 else None
            if not (_type(fam) is _int and fam == 1):  # AF_UNIX (socketpair)
                _deny(event, "(only AF_UNIX sockets are allowed)")

    def hook(event, args, _impl=hook_impl, _protected=None, _write=posix.write,
             _exit=posix._exit, _rc=cfg["blocked_rc"], _BE=BaseException):
        try:
            _impl(event, args, _protected)
        except _BE:
            # Never let an exception (and with it our frames) escape.
            try:
                _write(2, b"\n[mars-sandbox] blocked: exception inside the audit hook\n")
            except _BE:
                pass
            _exit(_rc)

    funcs = (deny, as_text, realpath, fd_target, resolve, check_mut, on_open, on_import,
             pid_ok, first_text, hook_impl, hook)
    for f in funcs:
        if f.__code__.co_freevars or f.__closure__ is not None or f.__kwdefaults__:
            raise RuntimeError("sandbox hook function %s has free variables" % f.__name__)
    protected = frozenset(id(f) for f in funcs)
    hook.__defaults__ = (hook_impl, protected, posix.write, posix._exit, cfg["blocked_rc"],
                         BaseException)
    sys.addaudithook(hook)


def _run(cfg):
    errfd = cfg["errfd"]
    try:
        import builtins, types, traceback, resource
        blocked = frozenset(cfg["blocked_imports"])
        for name in blocked:
            if name in sys.modules:
                raise RuntimeError("blocked module %s is already loaded" % name)
        path = cfg["program"]
        with open(path, "rb") as f:
            src = f.read()
        mem = cfg["memory_bytes"]
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        _install_hook(cfg)
        os.write(errfd, b"OK\n")
        os.close(errfd)
    except BaseException as e:
        _fail(errfd, "bootstrap: %s: %s" % (type(e).__name__, e), cfg["error_rc"])
    out, err, _exit = sys.stdout, sys.stderr, os._exit
    blocked_rc, memory_rc = cfg["blocked_rc"], cfg["memory_rc"]
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    sys.argv = [path]
    rc = 1
    try:
        code = compile(src, path, "exec", dont_inherit=True)
        del src
        exec(code, main.__dict__)
        rc = 0
    except SystemExit as e:
        c = e.code
        if c is None:
            rc = 0
        elif isinstance(c, int):
            rc = c & 0xFF
        else:
            rc = 1
            try:
                print(c, file=sys.stderr)
            except BaseException:
                pass
    except BaseException as e:
        rc = 1
        x, n = e, 0
        while x is not None and n < 50:
            if isinstance(x, ImportError) and type(x.name) is str and (
                    x.name in blocked or x.name.rpartition(".")[2] in blocked):
                rc = blocked_rc
                break
            x, n = (x.__cause__ or x.__context__), n + 1
        if rc == 1 and isinstance(e, MemoryError):
            rc = memory_rc
        try:
            tb = e.__traceback__
            traceback.print_exception(type(e), e, tb.tb_next if tb is not None else None)
        except BaseException:
            try:
                os.write(2, ("%s\n" % type(e).__name__).encode())
            except BaseException:
                pass
        if rc == blocked_rc:
            try:
                os.write(2, b"[mars-sandbox] blocked: import of a module refused by the sandbox\n")
            except BaseException:
                pass
    for s in (sys.stdout, sys.stderr, out, err):
        try:
            s.flush()
        except BaseException:
            pass
    _exit(rc)


def _entry():
    cfg = json.loads(sys.argv[2])
    if sys.argv[1].endswith(":launch"):
        _launch(cfg)
    else:
        _run(cfg)
    os._exit(cfg["error_rc"])

if __name__ == "__main__":
    _entry()
'''


# --------------------------------------------------------------------------
# Supervisor side
# --------------------------------------------------------------------------
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
            raw = bytes(self.head) + (
                f"\n...[{omitted} bytes truncated by sandbox]...\n".encode()
            ) + bytes(self.tail)
        return raw.decode("utf-8", errors="replace")


_uid_lock = threading.Lock()
_uids_in_use: set[int] = set()
_warned: set[str] = set()


def _read_uid_map(path: str) -> list[tuple[int, int, int]]:
    rows = []
    try:
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 3:
                    rows.append((int(parts[0]), int(parts[1]), int(parts[2])))
    except OSError:
        pass
    return rows


def _mapped(rows: list[tuple[int, int, int]], lo: int, hi: int) -> bool:
    return any(inside <= lo and hi <= inside + count for inside, _o, count in rows)


@lru_cache(maxsize=1)
def _dedicated_uids_possible() -> bool:
    lo, hi = _UID_BASE, _UID_BASE + _UID_SPAN
    return _mapped(_read_uid_map("/proc/self/uid_map"), lo, hi) and _mapped(
        _read_uid_map("/proc/self/gid_map"), lo, hi
    )


def _proc_uids(pid: str) -> tuple[list[int], str] | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            uids: list[int] = []
            state = "?"
            for line in f:
                if line.startswith("State:"):
                    state = line.split()[1]
                elif line.startswith("Uid:"):
                    uids = [int(x) for x in line.split()[1:]]
                    break
            return uids, state
    except (OSError, ValueError):
        return None


def _pids_with_uid(uid_lo: int, uid_hi: int | None = None) -> list[tuple[int, str]]:
    """(pid, state) of processes whose real/effective/saved/fs uid is in range."""
    hi = uid_lo + 1 if uid_hi is None else uid_hi
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        info = _proc_uids(name)
        if info and any(uid_lo <= u < hi for u in info[0]):
            found.append((int(name), info[1]))
    return found


def sandbox_processes() -> list[int]:
    """Pids of live processes that belong to sandboxes started by this process.

    A process counts if it runs under one of this supervisor's dedicated
    sandbox uids, or if its command line carries this supervisor's sandbox
    marker (which forked children inherit).  Meant for tests and monitoring.
    """
    pids: set[int] = set()
    if os.geteuid() == 0 and _dedicated_uids_possible():
        base = _UID_BASE + (os.getpid() % _PID_SLOTS) * _SLOTS_PER_PID
        pids.update(p for p, _s in _pids_with_uid(base, base + _SLOTS_PER_PID))
    marker = f"mars-sandbox:{os.getpid()}:".encode()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker in f.read():
                        pids.add(int(name))
            except OSError:
                pass
    return sorted(pids)


def _acquire_ids() -> tuple[int, int, bool]:
    """(uid, gid, dedicated) for a root supervisor."""
    if not _dedicated_uids_possible():
        return _NOBODY, _NOBODY, False
    base = _UID_BASE + (os.getpid() % _PID_SLOTS) * _SLOTS_PER_PID
    with _uid_lock:
        for i in range(_SLOTS_PER_PID):
            uid = base + i
            if uid in _uids_in_use:
                continue
            if _pids_with_uid(uid):
                continue  # leftover of a dead supervisor with a colliding pid
            _uids_in_use.add(uid)
            return uid, uid, True
    raise RuntimeError("no free sandbox uid (too many concurrent sandboxes)")


def _release_ids(uid: int) -> None:
    with _uid_lock:
        _uids_in_use.discard(uid)


def _sweep_uid(uid: int, exclude: int | None, wait_s: float) -> bool:
    """SIGKILL every process of ``uid`` until none (but ``exclude``) is left."""
    deadline = time.monotonic() + wait_s
    while True:
        left = [(p, s) for p, s in _pids_with_uid(uid) if p != exclude]
        for pid, state in left:
            if state != "Z":
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        if not left:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)


def _ancestors(path: str) -> list[str]:
    out, cur = [], ""
    for part in path.strip("/").split("/"):
        if part:
            cur = cur + "/" + part
            out.append(cur)
    return out


def _blocking_ancestor(path: str) -> str | None:
    """First directory on the way to ``path`` that 'other' cannot traverse."""
    for anc in _ancestors(path):
        try:
            st = os.stat(anc)
        except OSError:
            return None
        if stat.S_ISDIR(st.st_mode) and not st.st_mode & stat.S_IXOTH:
            return anc
    return None


def _top_level(paths: set[str]) -> list[str]:
    kept: list[str] = []
    for p in sorted(paths, key=len):
        if not any(p == k or p.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(p)
    return kept


@lru_cache(maxsize=1)
def _interpreter_paths() -> tuple[str, ...]:
    paths = {os.path.dirname(os.path.realpath(sys.executable))}
    for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix):
        if p:
            paths.add(os.path.realpath(p))
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p and os.path.isdir(p):
            paths.add(os.path.realpath(p))
    return tuple(_top_level({p for p in paths if os.path.isdir(p)}))


def _mount_plan(tmpdir: str, work: str) -> dict:
    hide: set[str] = set()
    needed = set(_interpreter_paths()) | {tmpdir}
    for p in needed:
        b = _blocking_ancestor(p)
        if b is not None and b != p:
            hide.add(b)
    private = []
    for t in _PRIVATE_TMP_CANDIDATES:
        try:
            st = os.lstat(t)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH:
            private.append(os.path.realpath(t))
    overlays = [(h, "hide") for h in _top_level(hide)]
    overlays += [(t, "private") for t in private
                 if not any(t == h or t.startswith(h + "/") for h in hide)]
    overlays.sort(key=lambda o: o[0].count("/"))

    def under_overlay(p: str) -> bool:
        return any(p == o or p.startswith(o.rstrip("/") + "/") for o, _k in overlays)

    binds = sorted((p for p in needed if under_overlay(p)), key=lambda p: p.count("/"))
    return {"overlays": overlays, "binds": binds, "tmpdir": tmpdir, "work": work,
            "work_kb": _WORK_TMPFS_KB, "work_inodes": _WORK_TMPFS_INODES}


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
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) \
            or not math.isfinite(timeout_s) or timeout_s <= 0:
        raise ValueError(f"timeout_s must be a positive finite number, got {timeout_s!r}")
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < 32:
        raise ValueError(f"memory_mb must be an int >= 32, got {memory_mb!r}")
    if cpu_s is not None and (isinstance(cpu_s, bool) or not isinstance(cpu_s, (int, float))
                              or not math.isfinite(cpu_s) or cpu_s <= 0):
        raise ValueError(f"cpu_s must be None or a positive finite number, got {cpu_s!r}")


def run_python(program: str, timeout_s: float = 5.0, memory_mb: int = 512,
               cpu_s: float | None = None) -> SandboxResult:
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
        return SandboxResult(False, "error", None, "",
                             f"sandbox error: {type(exc).__name__}: {exc}",
                             time.monotonic() - t0)


def _run_python(program: str, timeout_s: float, memory_mb: int, cpu_s: float | None,
                t0: float) -> SandboxResult:
    deadline = t0 + timeout_s
    is_root = os.geteuid() == 0
    uid = gid = None
    dedicated = False
    tmpdir = None
    proc = None
    ctl_r = ctl_w = None
    try:
        if is_root:
            uid, gid, dedicated = _acquire_ids()
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
        rlimits = [("RLIMIT_CPU", cpu_soft, cpu_soft + 1),
                   ("RLIMIT_FSIZE", _FSIZE_BYTES, _FSIZE_BYTES),
                   ("RLIMIT_NOFILE", _NOFILE, _NOFILE),
                   ("RLIMIT_CORE", 0, 0),
                   ("RLIMIT_NPROC", nproc, nproc)]
        blocked = list(_BLOCKED_IMPORTS) + ([] if nproc == 1 else list(_STRICT_EXTRA_IMPORTS))

        ctl_r, ctl_w = os.pipe()
        marker = f"mars-sandbox:{os.getpid()}"
        run_env = {"PATH": "/usr/bin:/bin", "HOME": work, "TMPDIR": work,
                   "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1",
                   "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                   "MKL_NUM_THREADS": "1"}
        run_cfg = {"errfd": ctl_w, "program": prog_path, "work_real": os.path.realpath(work),
                   "memory_bytes": memory_mb << 20, "blocked_imports": blocked,
                   "blocked_rc": _BLOCKED_RC, "memory_rc": _MEMORY_RC, "error_rc": _ERROR_RC}
        run_argv = [sys.executable, "-I", "-B", "-c", _CHILD_SOURCE, marker + ":run",
                    json.dumps(run_cfg)]
        launch_cfg = {"errfd": ctl_w, "rlimits": rlimits, "root": is_root, "uid": uid,
                      "gid": gid, "ppid": os.getpid(), "work": work, "exe": sys.executable,
                      "run_argv": run_argv, "env": run_env, "error_rc": _ERROR_RC,
                      "mounts": _mount_plan(tmpdir, work) if is_root else None}
        argv = [sys.executable, "-I", "-S", "-B", "-c", _CHILD_SOURCE, marker + ":launch",
                json.dumps(launch_cfg)]
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, pass_fds=(ctl_w,), close_fds=True,
                                start_new_session=True, cwd=tmpdir,
                                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
        os.close(ctl_w)
        ctl_w = None
        out, err, ctl, timed_out, rc, cpu_used = _supervise(
            proc, ctl_r, deadline, uid if dedicated else None)
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
            if _sweep_uid(uid, None, 1.0):
                _release_ids(uid)
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
        _sweep_uid(uid, exclude=pid, wait_s=1.0)


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


def _classify(out: str, err: str, ctl: bytes, timed_out: bool, rc: int | None,
              cpu_used: float, cpu_soft: int, wall: float) -> SandboxResult:
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
    return SandboxResult(passed=status == "passed", status=status, returncode=rc,
                         stdout=out, stderr=err, wall_s=wall)
