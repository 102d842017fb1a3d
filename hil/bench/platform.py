"""The platform's own figures for the benchmarks: its wake-up latency (cyclictest) and /proc probes.

``hil bench loop --baseline`` runs ``cyclictest`` (rt-tests, the standard Linux real-time latency test,
written in C) on the loop's CPU with the loop's SCHED_FIFO priority, period and duration, memory locked,
and reads its latency histogram. Its late wake-ups are the floor for any real-time loop on that CPU: ticks
that ``hil`` runs late by more than 1 ms while cyclictest also wakes up late by more than 1 ms come from the
platform (hypervisor steal, SMIs, firmware), not from the service. The probes say which CPU this is, how
long the hypervisor ran something else on a CPU (steal) and how many UDP datagrams the kernel dropped.
"""
from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

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


def platform_baseline(cpu: int, priority: int, period_s: float, duration_s: float) -> dict:
    """cyclictest on ``cpu`` at the loop's priority and period, with the hypervisor steal during it;
    ``{"error": ...}`` where cyclictest is missing or fails (the loop benchmark still runs)."""
    before = steal_s(cpu)
    try:
        result = run_cyclictest(cpu, priority, period_s, duration_s).as_dict()
    except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as exc:
        return {"error": str(exc)}
    after = steal_s(cpu)
    result["steal_ms"] = None if before is None or after is None else round((after - before) * 1e3, 1)
    return result


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo), else what :mod:`platform` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def steal_delta_ms(before: float | None, after: float | None) -> float | None:
    """Steal between two :func:`steal_s` readings, ms (0.1 ms resolution); None if either is unknown."""
    return None if before is None or after is None else round((after - before) * 1e3, 1)


def steal_s(cpu: int) -> float | None:
    """Time the hypervisor ran something else while ``cpu`` had work (``steal`` column of
    /proc/stat, proc(5)), s; None where the kernel does not report it."""
    try:
        with open("/proc/stat", encoding="utf-8") as fh:
            for line in fh:
                fields = line.split()
                if fields[0] == f"cpu{cpu}" and len(fields) > 8:
                    return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        pass
    return None


def udp_receive_buffer_errors() -> int | None:
    """Datagrams the kernel dropped because a UDP socket's receive buffer was full (all sockets of the
    machine: ``RcvbufErrors`` in /proc/net/snmp); None where not available."""
    try:
        lines = [line.split() for line in Path("/proc/net/snmp").read_text().splitlines() if line.startswith("Udp:")]
        return int(lines[1][lines[0].index("RcvbufErrors")])
    except (OSError, IndexError, ValueError):
        return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (for the benchmark's metrics endpoint)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
