"""What the machine did during a measurement besides our work: the hypervisor's steal share.

On a VM the host can run something else while one of our vCPUs wants to run ("steal" in
/proc/stat). Figures taken while steal is high say more about the host than about the code, so
the benchmarks print the share next to each row. Run as a script, it prints the two counts of
cpu_ticks() for shell benchmarks.
"""


def cpu_ticks():
    """(all ticks, stolen ticks) of the whole machine so far."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    # user nice system idle iowait irq softirq steal (guest time is already inside user)
    values = [int(v) for v in fields[1:9]]
    return sum(values), values[7]


class Steal:
    """The steal share of the machine's time from construction to percent()."""

    def __init__(self):
        self.before = cpu_ticks()

    def percent(self):
        total, stolen = cpu_ticks()
        elapsed = total - self.before[0]
        return 100.0 * (stolen - self.before[1]) / elapsed if elapsed > 0 else 0.0


if __name__ == "__main__":
    print(*cpu_ticks())
