# skillbox's Python supervisor: the first process of a pre-booted python
# sandbox. It starts with common modules imported, says it is ready, and
# waits for ONE job on its stdin: an 8-byte big-endian length, then that many
# bytes of NUL-separated fields (cwd, argc, argv..., env...); whatever
# follows on stdin is the script's stdin. It then becomes that run: the
# environment and cwd set, randomness reseeded, sys.argv and sys.path as
# `python3 SCRIPT ARGS` would have them, the script run as __main__. The
# process's exit status is the script's (SystemExit as Python handles it; an
# uncaught exception prints its traceback and exits 1), and it exits the way
# the interpreter would (see _skillbox_exit). The sandbox runs nothing else
# and is destroyed afterwards.
import os
import sys


def _skillbox_preload():
    # Where the standard library's C extensions live, for the exit (as
    # sysconfig's platstdlib has it, without importing sysconfig).
    global _skillbox_dynload
    _skillbox_dynload = os.path.join(sys.base_exec_prefix, sys.platlibdir, "python%d.%d" % sys.version_info[:2], "lib-dynload") + os.sep
    # A session sandbox's workers (SKILLBOX_PRELOAD=0) start one per run:
    # importing these would cost each run more CPU than it saves.
    if os.environ.get("SKILLBOX_PRELOAD") == "0":
        return
    # Modules most scripts import, cheap to hold. Not hashlib: it maps
    # OpenSSL, which costs each idle sandbox ~1.3 MiB; a script that needs
    # it imports it in a few milliseconds.
    import importlib
    for name in ("json", "re", "io", "random", "math", "collections", "datetime",
                 "pathlib", "typing", "itertools", "functools", "subprocess",
                 "csv", "base64", "struct", "time", "tempfile",
                 "shutil", "argparse", "textwrap", "string", "traceback",
                 "pkgutil"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    # What importing left behind goes now, not as a page per run later;
    # what is left is the interpreter's own for good, so the collections
    # of the run (and at its exit) need not walk it.
    import gc
    gc.collect()
    gc.freeze()


# A session sandbox's supervisor gives its workers a pipe for the run's exit
# status (SKILLBOX_STATUS_FD), read here before the job's environment
# replaces the worker's; no other process inherits it.
_skillbox_status_fd = int(os.environ.pop("SKILLBOX_STATUS_FD", "-1"))
if _skillbox_status_fd >= 0:
    try:
        os.set_inheritable(_skillbox_status_fd, False)
    except OSError:
        _skillbox_status_fd = -1


def _skillbox_read(n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(0, n - len(buf))
        if not chunk:
            os._exit(125)  # the host went away before a job came
        buf += chunk
    return buf


def _skillbox_run():
    # Only what every run needs is imported before the job: a worker of a
    # session sandbox serves one run, so each import here is CPU every run
    # pays. The job's header is NUL-separated (cwd, argc, argv..., env...),
    # read without json, and bytes as they came (as a native start has them).
    import builtins
    import io
    import re  # nearly every script imports it, directly or not
    import types

    _skillbox_preload()
    # The compiler's first use sets up state (~1.5 ms in gVisor) that
    # every later compile shares: it is paid here, before the job.
    compile("", "<skillbox>", "exec", dont_inherit=True)
    os.write(1, b"skillbox-ready\n")
    size = int.from_bytes(_skillbox_read(8), "big")
    fields = _skillbox_read(size).split(b"\0")
    argc = int(fields[1])
    argv = [os.fsdecode(a) for a in fields[2:2 + argc]]
    script = argv[1]

    os.environ.clear()
    for kv in fields[2 + argc:]:
        k, _, v = kv.partition(b"=")
        os.environb[k] = v
    os.chdir(os.fsdecode(fields[0]))
    # What `python3 SCRIPT` has: the script's directory first, then
    # PYTHONPATH, then the interpreter's own paths.
    rest = [p for p in sys.path[1:]]
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    sys.path[:] = [os.path.dirname(script)] + extra + rest
    sys.argv[:] = argv[1:]
    # Fresh randomness for this run, whatever happened before it (a random
    # not imported yet seeds itself from os.urandom when the run imports it).
    random = sys.modules.get("random")
    if random is not None:
        random.seed(os.urandom(32))
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(int.from_bytes(os.urandom(4), "big"))

    # The script's module is __main__, during the run and after it (for
    # atexit handlers), as with `python3 SCRIPT`.
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=script, __cached__=None, __loader__=None,
                         __package__=None, __spec__=None, __builtins__=builtins)
    sys.modules["__main__"] = main
    try:
        with io.open_code(script) as f:
            data = f.read()
        # The frozen import machinery is loaded already; importing it by
        # its package name would read importlib from disk (~4 ms in gVisor).
        if data[:4] == sys.modules["_frozen_importlib_external"].MAGIC_NUMBER:
            import pkgutil  # a compiled script, as runpy allows
            with io.open_code(script) as f:
                code = pkgutil.read_code(f)
        else:
            code = compile(data, script, "exec", dont_inherit=True)
        exec(code, main.__dict__)
    except SystemExit as e:
        return _skillbox_exit_status(e.code), main
    except BaseException as e:
        tb = e.__traceback__
        # Drop the supervisor's frames, as a native run has none.
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        import traceback
        traceback.print_exception(type(e), e, tb)
        return 1, main
    return 0, main


def _skillbox_exit_status(code):
    # SystemExit's code as the interpreter turns it into an exit status.
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if -(1 << 63) <= code < (1 << 63) else 255
    try:
        sys.stderr.write(str(code) + "\n")
    except BaseException:
        pass
    return 1


def _skillbox_stdlib_extensions_only():
    # Whether every loaded C extension is one of the standard library's.
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if isinstance(f, str) and not f.endswith((".py", ".pyc")) and not f.startswith(_skillbox_dynload):
            return False
    return True


def _skillbox_exit(status, main):
    # What `python3 SCRIPT` does on its way out: non-daemon threads joined,
    # atexit handlers run, the script's objects finalized (unclosed files
    # flushed, archives completed), stdout and stderr flushed (status 120
    # if that fails). Then the process ends without tearing down every
    # module of the interpreter, which costs ~10 ms in gVisor and matters
    # nothing to a sandbox destroyed next. With a C extension from outside
    # the standard library loaded, Python's own full exit runs instead, so
    # that its C-level state (stdio buffers, destructors) is finished too.
    import atexit
    import gc
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:
            pass
    atexit._run_exitfuncs()
    # The script's globals go as the interpreter clears a module at exit
    # (underscored names first, then the rest), so that objects are
    # finalized in reference order: an unclosed file's buffer is flushed
    # before its descriptor is closed. Then what is left in cycles.
    names = main.__dict__
    for group in ([k for k in names if k.startswith("_") and not k.startswith("__")], list(names)):
        for k in group:
            if k != "__builtins__":
                names[k] = None
    del names, main
    gc.collect()
    for f in (sys.stdout, sys.stderr):
        try:
            if f is not None and not getattr(f, "closed", False):
                f.flush()
        except BaseException:
            status = 120
    for f in (sys.__stdout__, sys.__stderr__):
        # Closed at teardown by the interpreter, errors ignored.
        try:
            if f is not None and f is not sys.stdout and f is not sys.stderr:
                f.flush()
        except BaseException:
            pass
    if not _skillbox_stdlib_extensions_only():
        sys.exit(status)
    if _skillbox_status_fd >= 0:
        # A session's worker tells the supervisor its status before the
        # process is torn down (~5 ms in gVisor), with stdout and stderr
        # closed first so that the run's output is whole when it is told.
        try:
            os.close(1)
            os.close(2)
            os.write(_skillbox_status_fd, bytes([status & 0xFF]))
        except OSError:
            pass
    os._exit(status)


_skillbox_exit(*_skillbox_run())
