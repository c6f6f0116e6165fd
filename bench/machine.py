"""What the machine did during a measurement besides our work: the hypervisor's steal share.

On a VM the host can run something else while one of our vCPUs wants to run ("steal" in
/proc/stat). Figures taken while steal is high say more about the host than about the code, so
the benchmarks print the share next to each row. For shell benchmarks, run as a script: with no
arguments it prints the two counts of cpu_ticks(); given two such samples (four numbers,
earlier first) it prints the steal percentage between them.
"""
import sys


def cpu_ticks():
    """(all ticks, stolen ticks) of the whole machine so far."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    # user nice system idle iowait irq softirq steal (guest time is already inside user)
    values = [int(v) for v in fields[1:9]]
    return sum(values), values[7]


def steal_percent(before, after):
    """The steal share of the machine's time between two cpu_ticks() samples."""
    elapsed = after[0] - before[0]
    return 100.0 * (after[1] - before[1]) / elapsed if elapsed > 0 else 0.0


class Steal:
    """The steal share of the machine's time from construction to percent()."""

    def __init__(self):
        self.before = cpu_ticks()

    def percent(self):
        return steal_percent(self.before, cpu_ticks())


if __name__ == "__main__":
    if len(sys.argv) == 5:
        counts = [int(v) for v in sys.argv[1:]]
        print(f"{steal_percent(counts[:2], counts[2:]):.1f}")
    else:
        print(*cpu_ticks())
