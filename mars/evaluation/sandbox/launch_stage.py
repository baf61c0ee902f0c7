"""Stage 1 of the sandboxed child: kernel limits, namespaces, privilege drop, then exec of the run stage.

Not imported by the supervisor: :mod:`mars.evaluation.sandbox.supervisor` reads this file's text (package data) and runs
it as ``python -I -S -B -c <text> mars-sandbox:<pid>:launch <json config>``.  With ``-I -S`` there is no site-packages,
so only the standard library is available and nothing from ``mars`` may be imported.  It sets the rlimits and, as
root, the private mount and network namespaces (the plan comes from :mod:`mars.evaluation.sandbox.mounts`) and drops to
the sandbox uid; then it execs the run stage (``run_stage.py``, ``cfg["run_argv"]``).  Threat model: docs/sandbox.md.
Importing this module (the tests do) has no side effect.
"""

import json
import os
import sys


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
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]

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
        warn("no network namespace (unshare: %s); relying on the audit hook" % os.strerror(ctypes.get_errno()))
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
            mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=512")
            active.append(path)
        else:
            try:
                mount("tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777,size=1m,nr_inodes=128")
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
        mount(
            "tmpfs",
            plan["work"],
            "tmpfs",
            MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "size=%dk,nr_inodes=%d,mode=0700,uid=%d,gid=%d"
            % (plan["work_kb"], plan["work_inodes"], cfg["uid"], cfg["gid"]),
        )
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
            if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid) or os.getgroups():
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


def _entry():
    cfg = json.loads(sys.argv[2])
    _launch(cfg)
    os._exit(cfg["error_rc"])


if __name__ == "__main__":
    _entry()
