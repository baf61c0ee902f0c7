"""Sandbox uids: a dedicated uid per concurrent call of a root supervisor, and the processes that run under them.

With a uid that owns no other process, ``RLIMIT_NPROC=1`` makes fork/clone fail in the kernel, and every process a
sandbox leaves behind can be found (and killed) by its uid.  The uids are ``UID_BASE + (supervisor pid %
PID_SLOTS) * SLOTS_PER_PID + i``, so concurrent supervisors (one per pid) never share one; where the uid map of the
supervisor's user namespace does not hold that range, the sandbox falls back to ``nobody``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from functools import lru_cache

UID_BASE = 1 << 30
PID_SLOTS = 1 << 22  # >= the largest possible pid_max
SLOTS_PER_PID = 64
UID_SPAN = PID_SLOTS * SLOTS_PER_PID
NOBODY = 65534

_uid_lock = threading.Lock()
_uids_in_use: set[int] = set()


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
def dedicated_uids_possible() -> bool:
    lo, hi = UID_BASE, UID_BASE + UID_SPAN
    return _mapped(_read_uid_map("/proc/self/uid_map"), lo, hi) and _mapped(_read_uid_map("/proc/self/gid_map"), lo, hi)


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
    if os.geteuid() == 0 and dedicated_uids_possible():
        base = UID_BASE + (os.getpid() % PID_SLOTS) * SLOTS_PER_PID
        pids.update(p for p, _s in _pids_with_uid(base, base + SLOTS_PER_PID))
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


def acquire_ids() -> tuple[int, int, bool]:
    """(uid, gid, dedicated) for a root supervisor."""
    if not dedicated_uids_possible():
        return NOBODY, NOBODY, False
    base = UID_BASE + (os.getpid() % PID_SLOTS) * SLOTS_PER_PID
    with _uid_lock:
        for i in range(SLOTS_PER_PID):
            uid = base + i
            if uid in _uids_in_use:
                continue
            if _pids_with_uid(uid):
                continue  # leftover of a dead supervisor with a colliding pid
            _uids_in_use.add(uid)
            return uid, uid, True
    raise RuntimeError("no free sandbox uid (too many concurrent sandboxes)")


def release_ids(uid: int) -> None:
    with _uid_lock:
        _uids_in_use.discard(uid)


def sweep_uid(uid: int, exclude: int | None, wait_s: float) -> bool:
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
