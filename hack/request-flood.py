#!/usr/bin/env python3
# The request flood of the hostile review (issue 14): N concurrent request
# lines of SIZE bytes each on a skillbox socket, one connection each, from
# the calling uid. Prints the daemon's RSS and peak RSS (VmHWM, MiB) before,
# right after and 5 s after, and how many connections got an answer.
#
#   hack/request-flood.py SOCKET DAEMON_PID [N=48] [SIZE_MIB=16]
import socket, sys, threading, time

sock, pid = sys.argv[1], int(sys.argv[2])
n = int(sys.argv[3]) if len(sys.argv) > 3 else 48
size = (int(sys.argv[4]) if len(sys.argv) > 4 else 16) << 20


def rss():
    out = {}
    for line in open(f"/proc/{pid}/status"):
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) // 1024
    return out


line = ('{"jsonrpc":"2.0","id":1,"method":"skills.run_script","params":'
        '{"session_id":"ses_x","path":"a.py","stdin":"%s"}}\n' % ("A" * (size - 200))).encode()
answered = []


def one():
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(sock)
        s.sendall(line)
        s.settimeout(60)
        if s.recv(4096):
            answered.append(1)
        s.close()
    except OSError:
        pass


print("before", rss(), flush=True)
threads = [threading.Thread(target=one) for _ in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("after", rss(), f"answered {len(answered)} of {n}", flush=True)
time.sleep(5)
print("after 5s", rss(), flush=True)
