"""A free TCP port on 127.0.0.1 for a private tgtd, below the kernel's ephemeral range (32768
and up) so that no connect() elsewhere takes it as its local port before tgtd binds it; random,
so that tests and benchmarks running in parallel differ. A module (bench/tgt.py) and a script
that prints the port (tests/harness/tgt.sh); neither holds the port, so tgtd must bind it soon.
"""
import random
import socket
import sys


def free_port():
    for _ in range(200):
        port = random.randint(20000, 32767)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port in 20000-32767 after 200 tries")


if __name__ == "__main__":
    try:
        print(free_port())
    except RuntimeError as e:
        sys.exit(str(e))
