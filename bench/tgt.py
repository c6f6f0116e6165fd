"""A private tgtd for benchmarks (the Python twin of tests/harness/tgt.sh)."""
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "harness"))
from free_port import free_port  # noqa: E402

# tgt's default logical block size, which every benchmark LUN has unless it says otherwise.
BLOCK_SIZE = 512


def rdma_cm_listening(port):
    """softrdma names an RDMA CM listener as the abstract socket @softrdma/<ns>/4/<addr>/<port>."""
    with open("/proc/net/unix") as f:
        return any("@softrdma/" in line and line.rstrip().endswith(f"/{port}") for line in f)


class Tgt:
    """tgtd on 127.0.0.1. With iser=True it also serves iSER on port 3260 (run under
    tests/harness/iser-netns: softrdma in front, a network namespace of its own)."""

    def __init__(self, iser=False):
        self.dir = tempfile.mkdtemp(prefix="iser-bench-tgt.")
        self.env = dict(os.environ, TGT_IPC_SOCKET=os.path.join(self.dir, "ipc"))
        self.iser = iser
        self.port = 3260 if iser else free_port()
        self.log = open(os.path.join(self.dir, "tgtd.log"), "w")
        self.start()

    def start(self):
        """Starts tgtd (again, after kill) on the same portal, IPC socket and log, with no
        configuration; returns once it accepts connections and tgtadm."""
        args = ["tgtd", "-f", "--iscsi", f"portal=127.0.0.1:{self.port}"]
        if self.iser:
            args += ["--iser", f"port={self.port},pool_sz_mb=256"]
        self.proc = subprocess.Popen(args, env=self.env, stdout=self.log, stderr=self.log)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                if (self.adm("--op show --mode system", check=False) == 0 and
                        (not self.iser or rdma_cm_listening(self.port))):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("tgtd did not start")

    def kill(self):
        """A crash: SIGKILL (tgtd ignores SIGTERM). It forgets its targets and LUNs."""
        self.proc.kill()
        self.proc.wait()

    def adm(self, args, check=True):
        rc = subprocess.call(["tgtadm"] + args.split(), env=self.env,
                             stdout=subprocess.DEVNULL)
        if check and rc != 0:
            raise RuntimeError(f"tgtadm {args} failed")
        return rc

    def state(self, state):
        """"offline" refuses logins while targets and LUNs are added, "ready" admits them again:
        what tgt's systemd unit does around its configuration, so that no initiator finds a
        target without its LUNs."""
        self.adm(f"--op update --mode sys --name State -v {state}")

    def target(self, tid, iqn, lld="iscsi", initiators=()):
        """initiators: names to bind as well (tgt 1.0.85's iSER target admits no others)."""
        self.adm(f"--lld {lld} --op new --mode target --tid {tid} -T {iqn}")
        self.adm(f"--lld {lld} --op bind --mode target --tid {tid} -I ALL")
        for name in initiators:
            self.adm(f"--lld {lld} --op bind --mode target --tid {tid} --initiator-name {name}")

    def lun(self, tid, lun, path, options="", lld="iscsi", block_size=BLOCK_SIZE):
        self.adm(f"--lld {lld} --op new --mode logicalunit --tid {tid} --lun {lun} -b {path} "
                 f"--blocksize {block_size} {options}")

    def stop(self):
        # tgtd refuses "--op delete --mode system" while it has targets and ignores SIGTERM; the
        # benchmarks need nothing from it any more.
        self.kill()
        subprocess.call(["rm", "-rf", self.dir])


def prefill(path, size):
    """Random data, so that reads move real bytes (a sparse file reads zeros for free)."""
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(chunk)
