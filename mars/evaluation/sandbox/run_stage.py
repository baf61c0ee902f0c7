"""Stage 2 of the sandboxed child: the audit hook, then the program itself as ``__main__``.

Not imported by the supervisor: the launch stage (``launch_stage.py``) execs
``python -I -B -c <this file's text> mars-sandbox:<pid>:run <json config>``.  It sets ``RLIMIT_AS``, installs the
audit hook (which must survive hostile code in the same interpreter: see the rules at the top of
:func:`_install_hook`), runs the program and leaves with ``os._exit`` so that interpreter finalisation (where audit
hooks are torn down) never runs user code.  Standard library only, nothing from ``mars``.  Threat model:
docs/sandbox.md.  Importing this module (the tests do, to inspect the hook's bytecode) has no side effect.
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
    import io
    import posix

    work = cfg["work_real"]
    flushes = tuple((type(s).flush, s) for s in (sys.stdout, sys.stderr) if type(s) is io.TextIOWrapper)
    WFLAGS = (
        posix.O_WRONLY | posix.O_RDWR | posix.O_CREAT | posix.O_TRUNC | posix.O_APPEND | getattr(posix, "O_TMPFILE", 0)
    )
    FDOBJ = "<fd>"  # resolution of a descriptor that is not a file (pipe, socket)

    def deny(
        event,
        what="",
        _flushes=flushes,
        _write=posix.write,
        _exit=posix._exit,
        _rc=cfg["blocked_rc"],
        _BE=BaseException,
    ):
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

    def realpath(
        path,
        _lstat=posix.lstat,
        _readlink=posix.readlink,
        _tuple=tuple,
        _len=len,
        _tget=tuple.__getitem__,
        _OSError=OSError,
        _ValueError=ValueError,
    ):
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

    def resolve(
        p,
        dir_fd=None,
        _type=type,
        _int=int,
        _bool=bool,
        _as_text=as_text,
        _realpath=realpath,
        _fd_target=fd_target,
        _getcwd=posix.getcwd,
        _OSError=OSError,
        _FDOBJ=FDOBJ,
    ):
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

    def check_mut(event, p, dir_fd=None, _resolve=resolve, _deny=deny, _as_text=as_text, _ws=work + "/", _FDOBJ=FDOBJ):
        rp = _resolve(p, dir_fd)
        if rp is None or not (rp == _FDOBJ or rp.startswith(_ws)):
            _deny(event, _as_text(p) or "")

    def on_open(
        args,
        _type=type,
        _int=int,
        _bool=bool,
        _str=str,
        _len=len,
        _resolve=resolve,
        _deny=deny,
        _as_text=as_text,
        _stat=posix.stat,
        _tget=tuple.__getitem__,
        _BE=BaseException,
        _work=work,
        _ws=work + "/",
        _wflags=WFLAGS,
        _pid=str(posix.getpid()),
    ):
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

    def on_import(
        args,
        _type=type,
        _str=str,
        _len=len,
        _deny=deny,
        _blocked=frozenset(cfg["blocked_imports"]),
        _modules=sys.modules,
        _setitem=dict.__setitem__,
    ):
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

    ev_deny = frozenset(
        (
            "os.fork",
            "os.forkpty",
            "os.exec",
            "os.posix_spawn",
            "os.system",
            "os.spawn",
            "os.startfile",
            "subprocess.Popen",
            "pty.spawn",
            "os.link",
            "os.symlink",
            "os.killpg",
            "socket.connect",
            "socket.bind",
            "socket.sendto",
            "socket.sendmsg",
            "socket.getaddrinfo",
            "socket.gethostbyname",
            "socket.gethostbyaddr",
            "socket.getnameinfo",
            "socket.sethostname",
            "http.client.connect",
            "ftplib.connect",
            "smtplib.connect",
            "poplib.connect",
            "imaplib.open",
            "nntplib.connect",
            "telnetlib.Telnet.open",
            "webbrowser.open",
            "ensurepip.bootstrap",
            "syslog.openlog",
            "syslog.syslog",
            "sqlite3.connect",
            "sqlite3.enable_load_extension",
            "sqlite3.load_extension",
            "cpython.PyInterpreterState_New",
            "cpython._PySys_ClearAuditHooks",
            "code.__new__",
            "gc.get_objects",
            "gc.get_referrers",
            "gc.get_referents",
        )
    )
    ev_mut_d1 = frozenset(("os.remove", "os.rmdir"))  # (path, dir_fd)
    ev_mut_d2 = frozenset(("os.mkdir", "os.chmod"))  # (path, mode, dir_fd)
    ev_mut_d3 = frozenset(("os.chown", "os.utime"))  # (path, a, b, dir_fd)
    ev_mut = frozenset(("os.truncate", "os.setxattr", "os.removexattr"))  # (path, ...)
    ev_opt1 = frozenset(
        ("shutil.copyfile", "shutil.copymode", "shutil.copystat", "shutil.copytree", "shutil.unpack_archive")
    )  # check args[1]
    ev_opt0 = frozenset(("shutil.rmtree",))  # check args[0]
    ev_attr = frozenset(("object.__setattr__", "object.__delattr__"))
    ev_all = (
        ev_deny
        | ev_mut_d1
        | ev_mut_d2
        | ev_mut_d3
        | ev_mut
        | ev_opt1
        | ev_opt0
        | ev_attr
        | frozenset(
            ("open", "import", "os.rename", "shutil.move", "os.chdir", "os.kill", "socket.__new__", "resource.prlimit")
        )
    )

    def first_text(args, _type=type, _str=str, _len=len):
        if _len(args) and _type(args[0]) is _str:
            return args[0]
        return ""

    def hook_impl(
        event,
        args,
        _protected,
        _type=type,
        _str=str,
        _bytes=bytes,
        _int=int,
        _tuple=tuple,
        _len=len,
        _id=id,
        _all=ev_all,
        _evdeny=ev_deny,
        _d1=ev_mut_d1,
        _d2=ev_mut_d2,
        _d3=ev_mut_d3,
        _m=ev_mut,
        _o1=ev_opt1,
        _o0=ev_opt0,
        _attr=ev_attr,
        _deny=deny,
        _on_open=on_open,
        _on_import=on_import,
        _check=check_mut,
        _resolve=resolve,
        _first=first_text,
        _pid_ok=pid_ok,
        _work=work,
    ):
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

    def hook(
        event,
        args,
        _impl=hook_impl,
        _protected=None,
        _write=posix.write,
        _exit=posix._exit,
        _rc=cfg["blocked_rc"],
        _BE=BaseException,
    ):
        try:
            _impl(event, args, _protected)
        except _BE:
            # Never let an exception (and with it our frames) escape.
            try:
                _write(2, b"\n[mars-sandbox] blocked: exception inside the audit hook\n")
            except _BE:
                pass
            _exit(_rc)

    funcs = (
        deny,
        as_text,
        realpath,
        fd_target,
        resolve,
        check_mut,
        on_open,
        on_import,
        pid_ok,
        first_text,
        hook_impl,
        hook,
    )
    for f in funcs:
        if f.__code__.co_freevars or f.__closure__ is not None or f.__kwdefaults__:
            raise RuntimeError("sandbox hook function %s has free variables" % f.__name__)
    protected = frozenset(id(f) for f in funcs)
    hook.__defaults__ = (hook_impl, protected, posix.write, posix._exit, cfg["blocked_rc"], BaseException)
    sys.addaudithook(hook)


def _run(cfg):
    errfd = cfg["errfd"]
    try:
        import builtins
        import resource
        import traceback
        import types

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
            if (
                isinstance(x, ImportError)
                and type(x.name) is str
                and (x.name in blocked or x.name.rpartition(".")[2] in blocked)
            ):
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
    _run(cfg)
    os._exit(cfg["error_rc"])


if __name__ == "__main__":
    _entry()
