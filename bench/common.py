"""What the Python benchmarks share: their common options, the build's programs, one run of
`iser-connect bench` and of libiscsi's `iscsi-perf` measured alike, and entering the network
namespace where tgtd serves iSER under softrdma.

A run is a dict: iops, mbs (10^6 bytes/s), ios, cpu (user+sys seconds of the initiator process,
from the kernel's accounting of the child), own (iser-connect only: its CPU without softrdma's
thread, which does in the initiator's process what an RDMA NIC does in hardware; None for
iscsi-perf), steal (the hypervisor's share of the machine's time during the run,
bench/machine.py) and connection (iser-connect's "TCP HOST:PORT (io_uring)", None from builds
that do not report it, and for iscsi-perf).
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys

from machine import Steal

HERE = os.path.dirname(os.path.abspath(__file__))


def parser(doc, seconds, size_mib=None, profile=False):
    """The options every benchmark takes: --time S, --rounds N, --build DIR (and --size-mib N
    when the benchmark prefills a LUN of that size, --profile NAME when it runs iSER under
    softrdma)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--time", type=int, default=seconds, help="seconds per run")
    ap.add_argument("--rounds", type=int, default=3, help="runs per tool; the median counts")
    ap.add_argument("--build", default="build", help="the build directory")
    ap.add_argument("--baseline", metavar="DIR",
                    help="another build (e.g. of the last landed commit) run beside --build in\n"
                         "the same rounds: rows 'baseline', and a 'new/old' ratio line")
    if size_mib is not None:
        ap.add_argument("--size-mib", type=int, default=size_mib, help="the LUN's size")
    if profile:
        ap.add_argument("--profile", metavar="NAME",
                        help="softrdma's device profile (SOFTRDMA_PROFILE: mlx5, rxe, bnxt_re,\n"
                             "siw, irdma-roce, irdma-iwarp, cxgb4; docs/softrdma.md) for tgtd\n"
                             "and the initiators, with its registration cost")
    return ap


def program(build, path):
    """The absolute path of the executable PATH of the build, or exit saying it is missing."""
    f = os.path.abspath(os.path.join(build, path))
    if not os.access(f, os.X_OK):
        sys.exit(f"{f} not found: run scripts/build first")
    return f


def enter_iser_netns(softrdma_run, profile=None):
    """Unless already there, runs this benchmark again under tests/harness/iser-netns (a network
    namespace of its own, softrdma in front) in place of this process, with softrdma's device
    PROFILE if given. softrdma's strict mode checks tests, not benchmarks: it is off here."""
    if os.environ.get("ISER_TEST_NETNS") != "1":
        if profile:
            os.environ["SOFTRDMA_PROFILE"] = profile
        netns = os.path.join(HERE, "..", "tests", "harness", "iser-netns")
        os.execv(netns, [netns, softrdma_run, sys.executable] + sys.argv)
    os.environ["SOFTRDMA_STRICT"] = "0"


def workload_label(rw, bs, qd, jobs=1):
    """"randread 4K QD32", "read 1M 4xQD8": a workload as the tables print it."""
    size = f"{bs >> 20}M" if bs % (1 << 20) == 0 else f"{bs // 1024}K"
    return f"{rw} {size} " + (f"QD{qd}" if jobs == 1 else f"{jobs}xQD{qd}")


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_ours(cli, url, rw, bs, qd, seconds, initiator=None, env=None):
    """One `iser-connect bench` run; INITIATOR is its -i, ENV its environment if given."""
    args = [cli] + (["-i", initiator] if initiator else [])
    args += ["bench", url, "--rw", rw, "--bs", str(bs), "--qd", str(qd), "--time", str(seconds),
             "--json"]
    steal = Steal()
    before = child_cpu()
    out = subprocess.run(args, check=True, capture_output=True, text=True, env=env).stdout
    cpu = child_cpu() - before
    d = json.loads(out)
    own = sum(v for k, v in d["cpu_s_by_thread"].items() if k != "softrdma")
    return {"iops": d["iops"], "mbs": d["mib_per_s"] * 1.048576, "ios": d["ios"], "cpu": cpu,
            "own": own, "steal": steal.percent(), "connection": d.get("connection"),
            "datamover": d.get("datamover", "")}


def run_libiscsi(url, rw, bs, qd, seconds, block_size, initiator=None):
    """One `iscsi-perf` run (reads only: it cannot write). It counts its transfer size in the
    LUN's blocks, so BLOCK_SIZE must be the LUN's logical block size. RuntimeError with its last
    words when it reports no figures."""
    args = ["iscsi-perf"] + (["-i", initiator] if initiator else [])
    args += ["-m", str(qd), "-b", str(bs // block_size), "-t", str(seconds)]
    if rw == "randread":
        args.append("-r")
    steal = Steal()
    before = child_cpu()
    p = subprocess.run(args + [url], capture_output=True, text=True, timeout=seconds + 30)
    cpu = child_cpu() - before
    m = re.findall(r"iops average (\d+) \((\d+) MB/s\)", p.stdout.replace("\r", "\n"))
    if not m:
        raise RuntimeError((p.stdout + p.stderr).strip().splitlines()[-1:] or ["no output"])
    iops = float(m[-1][0])
    return {"iops": iops, "mbs": iops * bs / 1e6, "ios": iops * seconds, "cpu": cpu, "own": None,
            "steal": steal.percent(), "connection": None}
