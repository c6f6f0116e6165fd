"""A private tgtd for benchmarks (the Python twin of tests/harness/tgt.sh)."""
import os
import socket
import subprocess
import tempfile
import time


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Tgt:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="iser-bench-tgt.")
        self.env = dict(os.environ, TGT_IPC_SOCKET=os.path.join(self.dir, "ipc"))
        self.port = free_port()
        self.log = open(os.path.join(self.dir, "tgtd.log"), "w")
        self.proc = subprocess.Popen(
            ["tgtd", "-f", "--iscsi", f"portal=127.0.0.1:{self.port}"],
            env=self.env, stdout=self.log, stderr=self.log)
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                if self.adm("--op show --mode system", check=False) == 0:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("tgtd did not start")

    def adm(self, args, check=True):
        rc = subprocess.call(["tgtadm"] + args.split(), env=self.env,
                             stdout=subprocess.DEVNULL)
        if check and rc != 0:
            raise RuntimeError(f"tgtadm {args} failed")
        return rc

    def target(self, tid, iqn):
        self.adm(f"--lld iscsi --op new --mode target --tid {tid} -T {iqn}")
        self.adm(f"--lld iscsi --op bind --mode target --tid {tid} -I ALL")

    def lun(self, tid, lun, path, options=""):
        self.adm(f"--lld iscsi --op new --mode logicalunit --tid {tid} --lun {lun} -b {path} {options}")

    def stop(self):
        self.adm("--op delete --mode system", check=False)
        try:
            self.proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        subprocess.call(["rm", "-rf", self.dir])


def prefill(path, size):
    """Random data, so that reads move real bytes (a sparse file reads zeros for free)."""
    chunk = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for _ in range(size >> 20):
            f.write(chunk)
