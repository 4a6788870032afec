# skillbox's Python supervisor: the first process of a pre-booted python
# sandbox. It starts with common modules imported, says it is ready, and
# waits for ONE job on its stdin: an 8-byte big-endian length, then that many
# bytes of JSON {"argv": [...], "env": [...], "cwd": "..."}; whatever
# follows on stdin is the script's stdin. It then becomes that run: the
# environment and cwd set, randomness reseeded, sys.argv and sys.path as
# `python3 SCRIPT ARGS` would have them, the script run as __main__. The
# process's exit status is the script's (SystemExit as Python handles it; an
# uncaught exception prints its traceback and exits 1). The sandbox runs
# nothing else and is destroyed afterwards.
import os
import sys


def _skillbox_preload():
    # Modules most scripts import, cheap to hold. Not hashlib: it maps
    # OpenSSL, which costs each idle sandbox ~1.3 MiB; a script that needs
    # it imports it in a few milliseconds.
    import importlib
    for name in ("json", "re", "io", "random", "math", "collections", "datetime",
                 "pathlib", "typing", "itertools", "functools", "subprocess",
                 "csv", "base64", "struct", "time", "tempfile",
                 "shutil", "argparse", "textwrap", "string", "traceback", "runpy"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    # What importing left behind goes now, not as a page per run later.
    import gc
    gc.collect()


def _skillbox_read(n):
    buf = b""
    while len(buf) < n:
        chunk = os.read(0, n - len(buf))
        if not chunk:
            os._exit(125)  # the host went away before a job came
        buf += chunk
    return buf


def _skillbox_run():
    import json
    import random
    import runpy
    import traceback

    _skillbox_preload()
    os.write(1, b"skillbox-ready\n")
    size = int.from_bytes(_skillbox_read(8), "big")
    job = json.loads(_skillbox_read(size))
    argv, script = job["argv"], job["argv"][1]

    os.environ.clear()
    for kv in job["env"]:
        k, _, v = kv.partition("=")
        os.environ[k] = v
    os.chdir(job["cwd"])
    # What `python3 SCRIPT` has: the script's directory first, then
    # PYTHONPATH, then the interpreter's own paths.
    rest = [p for p in sys.path[1:]]
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
    sys.path[:] = [os.path.dirname(script)] + extra + rest
    sys.argv[:] = argv[1:]
    # Fresh randomness for this run, whatever happened before it.
    random.seed(os.urandom(32))
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(int.from_bytes(os.urandom(4), "big"))

    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__
        # Drop the supervisor's and runpy's frames, as a native run has none.
        while tb is not None and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        traceback.print_exception(type(e), e, tb)
        sys.stderr.flush()
        sys.exit(1)


_skillbox_run()
