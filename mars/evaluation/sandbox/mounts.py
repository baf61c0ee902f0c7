"""The private mount namespace of a root supervisor's child: which directories are hidden, made private or bound.

Computed by the supervisor (it can stat everything), carried out by the child's launch stage
(``mars/evaluation/sandbox/launch_stage.py``, ``_namespaces``).  World-writable directories become tiny private tmpfs
instances; directories the dropped uid could not traverse but the interpreter lives in (e.g. ``/root`` of a pyenv
install) are replaced by an empty read-only tmpfs with only the interpreter prefix bound back read-only.
"""

from __future__ import annotations

import os
import stat
import sys
import sysconfig
from functools import lru_cache

WORK_TMPFS_KB = 32 * 1024
WORK_TMPFS_INODES = 2048
PRIVATE_TMP_CANDIDATES = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


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


def mount_plan(tmpdir: str, work: str) -> dict:
    hide: set[str] = set()
    needed = set(_interpreter_paths()) | {tmpdir}
    for p in needed:
        b = _blocking_ancestor(p)
        if b is not None and b != p:
            hide.add(b)
    private = []
    for t in PRIVATE_TMP_CANDIDATES:
        try:
            st = os.lstat(t)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH:
            private.append(os.path.realpath(t))
    overlays = [(h, "hide") for h in _top_level(hide)]
    overlays += [(t, "private") for t in private if not any(t == h or t.startswith(h + "/") for h in hide)]
    overlays.sort(key=lambda o: o[0].count("/"))

    def under_overlay(p: str) -> bool:
        return any(p == o or p.startswith(o.rstrip("/") + "/") for o, _k in overlays)

    binds = sorted((p for p in needed if under_overlay(p)), key=lambda p: p.count("/"))
    return {
        "overlays": overlays,
        "binds": binds,
        "tmpdir": tmpdir,
        "work": work,
        "work_kb": WORK_TMPFS_KB,
        "work_inodes": WORK_TMPFS_INODES,
    }
