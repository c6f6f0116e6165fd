"""What the Python benchmarks share: their common options, the build's programs, one run of
`iser-connect bench` and of libiscsi's `iscsi-perf` measured alike, and entering the network
namespace where tgtd serves iSER under softrdma.

A run is a dict: iops, mbs (10^6 bytes/s), ios, cpu (user+sys seconds of the initiator process,
from the kernel's accounting of the child), own (iser-connect only: its CPU without softrdma's
thread, which does in the initiator's process what an RDMA NIC does in hardware; None for
iscsi-perf), steal (the hypervisor's share of the machine's time during the run,
bench/machine.py) and connection (iser-connect's "TCP HOST:PORT (io_uring)", None from builds
that do not report it, and for iscsi-perf).

--update-doc (DocRow): after the run, a benchmark writes its headline figures, the date, the
commit and its command line into its own row of the "Current figures" table of
docs/performance.md. A row is the table line holding `<!-- row: KEY -->`; only its "command"
and "current figure" cells are written, the others are people's judgement. Shell benchmarks use
the same code through this file's command line:

    state=$(python3 bench/common.py begin KEY [--env NAME ...] -- "$0" "$@")   # before the run
    python3 bench/common.py end "$state" "HEADLINE"                          # after it
"""
import argparse
import json
import os
import re
import resource
import shlex
import subprocess
import sys
import time

from machine import Steal, cpu_ticks, steal_percent

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
DOC = os.path.join(TOP, "docs", "performance.md")
TABLE_HEADING = "## Current figures"
# A benchmark that runs itself again (enter_iser_netns) hands its begun row to the second process
# here, so that the row's time, steal and command count from the first one's start.
ROW_STATE = "ISER_BENCH_DOC_ROW"
# Environment variables of the initiator and softrdma that change what a benchmark measures: a
# row's command shows those that were set.
KNOBS = ("ISER_CONNECT_TCP_DATAMOVER", "ISER_CONNECT_STAGS", "ISER_CONNECT_RECEIVE_COALESCING",
         "SOFTRDMA_PROFILE", "SOFTRDMA_REG_MR_US", "SOFTRDMA_DELAY_US")


def parser(doc, seconds, size_mib=None, profile=False):
    """The options every benchmark takes: --time S, --rounds N, --build DIR, --baseline DIR,
    --update-doc (and --size-mib N when the benchmark prefills a LUN of that size, --profile NAME
    when it runs iSER under softrdma)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--time", type=int, default=seconds, help="seconds per run")
    ap.add_argument("--rounds", type=int, default=3, help="runs per tool; the median counts")
    ap.add_argument("--build", default="build", help="the build directory")
    ap.add_argument("--baseline", metavar="DIR",
                    help="another build (e.g. of the last landed commit) run beside --build in\n"
                         "the same rounds: rows 'baseline', and a 'new/old' ratio line")
    ap.add_argument("--update-doc", action="store_true",
                    help="after the run, write its figures, date, commit and this command into\n"
                         "the benchmark's row of the Current figures table of docs/performance.md")
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


def _cells(line):
    """The (start, end) offsets of each cell of a Markdown table line, between its pipes; an
    escaped pipe (\\|) stays inside its cell."""
    bars = [m.start() for m in re.finditer(r"(?<!\\)\|", line)]
    return list(zip([b + 1 for b in bars], bars[1:]))


def _cell_text(text):
    """TEXT as one table cell: on one line, its pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _code(text):
    """TEXT as inline code, fenced by more backticks than it holds in a row."""
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if fence != "`" else f"`{text}`"


def _find_row(lines, key, doc):
    """(line index of KEY's row, {column name: cell index}) in the Current figures table of
    LINES; exits saying what is missing."""
    where = os.path.relpath(doc)
    if TABLE_HEADING not in lines:
        sys.exit(f"--update-doc: {where} has no '{TABLE_HEADING}' section")
    first = lines.index(TABLE_HEADING) + 1
    last = next((i for i in range(first, len(lines)) if lines[i].startswith("## ")), len(lines))
    table = [i for i in range(first, last) if lines[i].startswith("|")]
    if not table:
        sys.exit(f"--update-doc: '{TABLE_HEADING}' in {where} holds no table")
    header = lines[table[0]]
    columns = {header[a:b].strip(): n for n, (a, b) in enumerate(_cells(header))}
    for name in ("command", "current figure"):
        if name not in columns:
            sys.exit(f"--update-doc: the table in {where} has no '{name}' column")
    marker = f"<!-- row: {key} -->"
    rows = [i for i in table if marker in lines[i]]
    if not rows:
        # Appending a row would need its comparison, goal and status: people write those.
        sys.exit(f"--update-doc: no row of the table in {where} is marked '{marker}': add the "
                 f"row by hand (its comparison, goal and status are not the benchmark's to "
                 f"write), or run without --update-doc")
    if len(rows) > 1:
        sys.exit(f"--update-doc: {len(rows)} rows of the table in {where} are marked '{marker}'")
    if len(_cells(lines[rows[0]])) != len(columns):
        sys.exit(f"--update-doc: the row '{marker}' in {where} does not have the table's "
                 f"{len(columns)} cells")
    return rows[0], columns


def _commit():
    """`git rev-parse --short HEAD` of the tree, +dirty when a file differs from it. The table
    itself does not count: else refreshing one row would call the next row's tree dirty."""
    def git(*args):
        return subprocess.run(["git", "-C", TOP] + list(args), check=True, capture_output=True,
                              text=True).stdout.strip()
    try:
        head = git("rev-parse", "--short", "HEAD")
        changes = git("status", "--porcelain", "--", ".",
                      f":(exclude){os.path.relpath(DOC, TOP)}")
    except (OSError, subprocess.CalledProcessError) as e:
        sys.exit(f"--update-doc: no commit to name in the row: {getattr(e, 'stderr', '') or e}")
    return head + ("+dirty" if changes else "")


def _from_top(word):
    """A path inside the tree as seen from its top, where the table's commands are run; any
    other word as it is."""
    path = os.path.abspath(word)
    if os.path.exists(word) and (path + os.sep).startswith(TOP + os.sep):
        return os.path.relpath(path, TOP)
    return word


def command_line(argv, env=()):
    """ARGV as a command run from the top of the tree, without --update-doc (the row shows how
    to get its figure, not how to write it), after those of the KNOBS and of the environment
    variables named in ENV (the benchmark's inputs that are not options) that are set."""
    words = [f"{name}={shlex.quote(_from_top(os.environ[name]))}" for name in KNOBS + tuple(env)
             if os.environ.get(name)]
    words += [shlex.quote(_from_top(w)) for w in argv if w != "--update-doc"]
    return " ".join(words)


def _span(start, end):
    """"2026-11-29 10:02-10:15 UTC": from START to END (Unix times), to the minute."""
    a, b = time.gmtime(start), time.gmtime(end)
    text = time.strftime("%Y-%m-%d %H:%M", a)
    if time.strftime("%Y-%m-%d", a) != time.strftime("%Y-%m-%d", b):
        return f"{text}-{time.strftime('%Y-%m-%d %H:%M', b)} UTC"
    if time.strftime("%H:%M", a) != time.strftime("%H:%M", b):
        return f"{text}-{time.strftime('%H:%M', b)} UTC"
    return f"{text} UTC"


class DocRow:
    """A benchmark's row of the Current figures table of docs/performance.md, begun before the
    run (a missing row stops the benchmark then, not after it has run) and written after it
    (write). The row's figure cell gets the run's time span, the commit, the steal share of the
    whole run and the 1-minute load average when it began (other jobs on the machine), then the
    benchmark's headline; its command cell gets the command line."""

    def __init__(self, state):
        self.__dict__.update(state)

    @classmethod
    def begin(cls, key, argv, env=(), doc=DOC):
        with open(doc) as f:
            _find_row(f.read().split("\n"), key, doc)
        return cls({"key": key, "doc": os.path.abspath(doc), "start": time.time(),
                    "ticks": cpu_ticks(), "load": os.getloadavg()[0], "commit": _commit(),
                    "command": command_line(argv, env)})

    def state(self):
        """The begun row as one line of text, for DocRow(json.loads(...)) in another process."""
        return json.dumps(self.__dict__)

    def write(self, headline):
        """Rewrites the row's command and figure cells in place (the file keeps its owner and
        mode: benchmarks run as root in a tree that may not be root's)."""
        figure = (f"{_span(self.start, time.time())}, {self.commit}, steal "
                  f"{steal_percent(self.ticks, cpu_ticks()):.0f}%, load {self.load:.1f} at the "
                  f"start: {headline}")
        # First, so that the figure survives a row that went missing during the run.
        print(f"{os.path.relpath(self.doc)}, row {self.key}: {_cell_text(figure)}", flush=True)
        with open(self.doc, "r+") as f:
            lines = f.read().split("\n")
            i, columns = _find_row(lines, self.key, self.doc)
            cells = _cells(lines[i])
            new = {columns["command"]: _code(self.command), columns["current figure"]: figure}
            line = lines[i]
            for n in sorted(new, reverse=True):  # from the right: earlier offsets stay valid
                a, b = cells[n]
                line = f"{line[:a]} {_cell_text(new[n])} {line[b:]}"
            lines[i] = line
            f.seek(0)
            f.write("\n".join(lines))
            f.truncate()


def doc_row(args, key, partial=None, env=()):
    """The benchmark's DocRow when --update-doc asks for one, else None. Call it before the
    benchmark starts and before enter_iser_netns (the process in the namespace carries on with
    this one's row). PARTIAL says why these options measure only a part of what the row states:
    such a run does not replace the row. ENV: as command_line's."""
    if not args.update_doc:
        return None
    if partial:
        sys.exit(f"--update-doc: {partial}; the row states the whole comparison")
    if os.environ.get(ROW_STATE):
        row = DocRow(json.loads(os.environ[ROW_STATE]))
        if row.key == key:
            return row
    row = DocRow.begin(key, sys.argv, env)
    os.environ[ROW_STATE] = row.state()
    return row


def ratio_range(values, fmt="{:.2f}"):
    """"0.10-0.12×", or "0.10×" when they agree to the format's precision."""
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return f"{lo}×" if lo == hi else f"{lo}-{hi}×"


def main():
    ap = argparse.ArgumentParser(
        description="--update-doc for shell benchmarks: begin prints the state that end needs")
    steps = ap.add_subparsers(dest="step", required=True)
    begin = steps.add_parser("begin", help="check that the row exists; print the begun row")
    begin.add_argument("key", help="the row's key, as in <!-- row: KEY -->")
    begin.add_argument("--env", action="append", default=[], metavar="NAME",
                       help="an environment variable to show before the command when set")
    begin.add_argument("command", nargs="+", help="the benchmark's command line (\"$0\" \"$@\")")
    end = steps.add_parser("end", help="write the row")
    end.add_argument("state", help="what begin printed")
    end.add_argument("headline", help="the benchmark's headline figures, one sentence")
    a = ap.parse_args()
    if a.step == "begin":
        print(DocRow.begin(a.key, a.command, a.env).state())
    else:
        DocRow(json.loads(a.state)).write(a.headline)


if __name__ == "__main__":
    main()
