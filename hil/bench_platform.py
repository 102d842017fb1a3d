"""Platform baseline for ``hil bench loop --baseline``: the wake-up latency of the machine itself.

Runs ``cyclictest`` (rt-tests, the standard Linux real-time latency test, written in C) on the loop's CPU
with the loop's SCHED_FIFO priority, period and duration, memory locked, and reads its latency
histogram. Its late wake-ups are the floor for any real-time loop on that CPU: ticks that ``hil`` runs
late by more than 1 ms while cyclictest also wakes up late by more than 1 ms come from the platform
(hypervisor steal, SMIs, firmware), not from the service.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

HISTOGRAM_US = 5000
"""Histogram bins of 1 µs up to this; later wake-ups are counted as overflows (cyclictest ``-h``)."""


@dataclass(frozen=True)
class LatencyBaseline:
    """cyclictest's wake-up latency (µs) over ``samples`` periods."""

    samples: int
    p50_us: float
    p99_us: float
    p999_us: float
    max_us: float
    over_1ms: int

    def as_dict(self) -> dict:
        return {"tool": "cyclictest", "samples": self.samples, "p50_us": self.p50_us, "p99_us": self.p99_us,
                "p999_us": self.p999_us, "max_us": self.max_us, "over_1ms": self.over_1ms}


def parse_cyclictest_histogram(text: str) -> LatencyBaseline:
    """Percentiles from the output of ``cyclictest -q -h N -t 1``: lines ``<µs> <count>`` below N, then
    ``# Max Latencies: <µs>`` and ``# Histogram Overflows: <count>`` (samples ≥ N µs)."""
    counts: dict[int, int] = {}
    max_us = overflows = None
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if fields[0].isdigit() and len(fields) >= 2:
            counts[int(fields[0])] = int(fields[1])
        elif line.startswith("# Max Latencies:"):
            max_us = int(fields[-1])
        elif line.startswith("# Histogram Overflows:"):
            overflows = int(fields[-1])
    if not counts or max_us is None or overflows is None:
        raise ValueError("no cyclictest histogram in the output")
    samples = sum(counts.values()) + overflows
    if samples == 0:
        raise ValueError("cyclictest recorded no samples")

    def percentile(q: float) -> float:
        rank = q * samples
        seen = 0
        for us in sorted(counts):
            seen += counts[us]
            if seen >= rank:
                return float(us)
        return float(max_us)  # in the overflow

    over_1ms = sum(n for us, n in counts.items() if us > 1000) + overflows
    return LatencyBaseline(samples=samples, p50_us=percentile(0.5), p99_us=percentile(0.99),
                           p999_us=percentile(0.999), max_us=float(max_us), over_1ms=over_1ms)


def run_cyclictest(cpu: int, priority: int, period_s: float, duration_s: float) -> LatencyBaseline:
    """``cyclictest -m -p PRIO -a CPU -t 1 -i PERIOD_US -l TICKS -q -h 5000`` (one SCHED_FIFO thread
    pinned to ``cpu``, memory locked, clock_nanosleep on absolute deadlines). Raises ``RuntimeError``
    with cyclictest's message if it fails (e.g. without the right to SCHED_FIFO)."""
    exe = shutil.which("cyclictest")
    if exe is None:
        raise RuntimeError("cyclictest not found (Debian/Ubuntu: apt install rt-tests)")
    loops = max(1, round(duration_s / period_s))      # -l: exactly the loop's number of ticks
    cmd = [exe, "-m", "-p", str(priority), "-a", str(cpu), "-t", "1", "-i", str(round(period_s * 1e6)),
           "-l", str(loops), "-q", "-h", str(HISTOGRAM_US)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 60)
    if out.returncode != 0:
        raise RuntimeError(f"cyclictest failed ({out.returncode}): {out.stderr.strip() or out.stdout.strip()}")
    return parse_cyclictest_histogram(out.stdout)


WORKQUEUE_CPUMASK = "/sys/devices/virtual/workqueue/cpumask"


def unbound_workqueue_cpus(path: str = WORKQUEUE_CPUMASK) -> list[int] | None:
    """CPUs on which the kernel runs unbound work items (e.g. a pty handing written bytes to its reader,
    ``flush_to_ldisc``); None where the kernel does not say. A kernel worker on the loop's CPU only runs
    when the SCHED_FIFO loop sleeps, so work queued there waits for the loop's compute and spin."""
    try:
        with open(path, encoding="ascii") as fh:
            mask = int(fh.read().strip().replace(",", ""), 16)
    except (OSError, ValueError):
        return None
    return [cpu for cpu in range(mask.bit_length()) if mask >> cpu & 1]
