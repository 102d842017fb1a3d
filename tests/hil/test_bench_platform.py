"""The platform baseline of ``hil bench loop --baseline`` (cyclictest histogram parsing and the run)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from hil.bench.platform import parse_cyclictest_histogram, run_cyclictest


def _histogram(counts: dict[int, int], overflows: int, max_us: int) -> str:
    lines = ["# /dev/cpu_dma_latency set to 0us", "# Histogram"]
    lines += [f"{us:06d} {counts.get(us, 0):09d}" for us in range(0, 1500)]
    lines += [f"# Total: {sum(counts.values()):09d}", "# Min Latencies: 00003", "# Avg Latencies: 00020",
              f"# Max Latencies: {max_us:05d}", f"# Histogram Overflows: {overflows:05d}",
              "# Histogram Overflow at cycle number:", "# Thread 0:"]
    return "\n".join(lines) + "\n"


def test_percentiles_and_late_wakeups_from_the_histogram():
    # 10000 samples: 9000 at 20 µs, 980 at 50 µs, 15 at 300 µs, 3 at 1200 µs, 2 overflows (>= 1500 µs)
    text = _histogram({20: 9000, 50: 980, 300: 15, 1200: 3}, overflows=2, max_us=2837)
    result = parse_cyclictest_histogram(text)
    assert result.samples == 10000
    assert (result.p50_us, result.p99_us, result.p999_us) == (20.0, 50.0, 300.0)
    assert result.max_us == 2837.0
    assert result.over_1ms == 5
    # a bin at exactly 1000 µs is not late by more than 1 ms
    assert parse_cyclictest_histogram(_histogram({20: 99, 1000: 1}, 0, 1000)).over_1ms == 0


def test_output_without_a_histogram_is_an_error():
    with pytest.raises(ValueError, match="no cyclictest histogram"):
        parse_cyclictest_histogram("cyclictest: invalid option\n")


def test_bench_loop_baseline_without_cyclictest_reports_why(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))  # no cyclictest on this PATH
    out = subprocess.run([sys.executable, "-m", "hil", "bench", "loop", "--period", "0.004", "--duration", "0.5",
                          "--scrape-interval", "0", "--baseline", "--json"], capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert "rt-tests" in doc["baseline"]["error"] and doc["ticks"] == 125


@pytest.mark.skipif(shutil.which("cyclictest") is None, reason="cyclictest (rt-tests) is not installed")
def test_cyclictest_run_on_this_machine():
    result = run_cyclictest(cpu=0, priority=10, period_s=0.001, duration_s=1)
    assert 900 <= result.samples <= 1100
    assert 0 <= result.p50_us <= result.p99_us <= result.p999_us <= result.max_us


def test_unbound_workqueue_cpumask_is_read_as_a_cpu_list(tmp_path):
    from hil.bench.platform import unbound_workqueue_cpus
    mask = tmp_path / "cpumask"
    mask.write_text("3\n")
    assert unbound_workqueue_cpus(str(mask)) == [0, 1]
    mask.write_text("00000001,00000004\n")          # comma-separated 32-bit words, most significant first
    assert unbound_workqueue_cpus(str(mask)) == [2, 32]
    assert unbound_workqueue_cpus(str(tmp_path / "missing")) is None
