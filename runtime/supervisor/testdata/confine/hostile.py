# A hostile job under a confining supervisor: it tries every way at the
# supervisor (pid argv[1]) and prints one "check: outcome" line each,
# outcome "ok" or the errno's name. argv[2] is the sandbox's eth0 address
# ("" for none), argv[3] a file of the supervisor's (0600, root's).
import errno, os, signal, socket, sys

sup, eth, secret = int(sys.argv[1]), sys.argv[2], sys.argv[3]


def report(name, f):
    try:
        f()
        out = "ok"
    except OSError as e:
        out = errno.errorcode.get(e.errno, str(e.errno))
    print(f"{name}: {out}", flush=True)


def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()


print(f"uid: {os.getuid()} {os.geteuid()}")
print(f"gid: {os.getgid()} {os.getegid()}")
print(f"groups: {status('Groups')}")
print(f"capeff: {status('CapEff')}")
print(f"netns: {os.readlink('/proc/self/ns/net')}")


def own_loopback():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    c = socket.create_connection(srv.getsockname(), timeout=5)
    a, _ = srv.accept()
    c.sendall(b"x")
    assert a.recv(1) == b"x"


report("own loopback", own_loopback)


def dial(family, addr):
    def f():
        s = socket.socket(family, socket.SOCK_STREAM)
        s.settimeout(5)
        try:
            s.connect(addr)
        finally:
            s.close()
    return f


for name, fam, addr in [
    ("dial 127.0.0.1", socket.AF_INET, ("127.0.0.1", 7001)),
    ("dial 0.0.0.0 listener", socket.AF_INET, ("127.0.0.1", 7002)),
    ("dial ::1", socket.AF_INET6, ("::1", 7003)),
] + ([
    ("dial eth0", socket.AF_INET, (eth, 7004)),
    ("dial eth0 0.0.0.0 listener", socket.AF_INET, (eth, 7002)),
] if eth else []):
    report(name, dial(fam, addr))
report("dial abstract", dial(socket.AF_UNIX, "\0skillbox-agent"))
report("read secret", lambda: open(secret).read())
report("read environ", lambda: open(f"/proc/{sup}/environ", "rb").read())
report("read mem", lambda: open(f"/proc/{sup}/mem", "rb").read(1))
report("list fd", lambda: os.listdir(f"/proc/{sup}/fd"))
report("open fd 0", lambda: open(f"/proc/{sup}/fd/0", "rb").close())
report("kill 0", lambda: os.kill(sup, 0))
report("kill TERM", lambda: os.kill(sup, signal.SIGTERM))
report("setuid 0", lambda: os.setuid(0))


def setns():
    fd = os.open(f"/proc/{sup}/ns/net", os.O_RDONLY)
    try:
        os.setns(fd, os.CLONE_NEWNET)
    finally:
        os.close(fd)


if hasattr(os, "setns"):
    report("setns", setns)
else:
    print("setns: no os.setns")


def ptrace():
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, sup, None, None) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), "ptrace")


try:
    import ctypes  # noqa: F401
    report("ptrace", ptrace)
except ImportError:
    print("ptrace: no ctypes")

# With "hold", it stays until SIGTERM, so that the test may see the
# supervisor's listeners still there after the checks.
if sys.argv[4:] == ["hold"]:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("checked", flush=True)
    while True:
        signal.pause()
