"""`hil bench link` runs end to end for both transports (figures are printed, never asserted)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("transport", ["can", "serial"])
def test_bench_link_reports_round_trips(transport):
    out = subprocess.run([sys.executable, "-m", "hil", "bench", "link", "--transport", transport, "--rate", "250",
                          "--duration", "2", "--baseline", "--json"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    [run] = json.loads(out.stdout)["runs"]
    assert run["rate_hz"] == 250 and run["commands_sent"] > 100
    assert run["round_trips"] > 0.9 * run["commands_sent"]
    for key in ("rtt_p50_ms", "rtt_p99_ms", "rtt_max_ms", "lost_frames", "applied_next_tick_percent"):
        assert key in run
    assert run["rtt_p50_ms"] <= run["rtt_p99_ms"] <= run["rtt_max_ms"]
    assert not run["commands_rejected"]
    # CAN sends from the first tick on; a sensor pty fills up until the peer opens it
    assert run["hil_frames_not_sent"] == 0 if transport == "can" else run["hil_frames_not_sent"] >= 0
    assert (run["udp_receive_buffer_overflows"] is None) == (transport == "serial")
    # the floor run: the link's endpoint alone answered the same peer
    floor = run["baseline"]
    assert floor["baseline"] and floor["rate_hz"] == 250 and floor["commands_sent"] > 100
    assert floor["round_trips"] > 0.9 * floor["commands_sent"] and floor["applied_next_tick_percent"] > 90
    assert floor["rtt_p50_ms"] <= floor["rtt_p99_ms"] and floor["responder_lateness_p99_us"] >= 0


def test_udp_receive_buffer_errors_reads_the_kernel_counter():
    from hil.bench.platform import udp_receive_buffer_errors
    n = udp_receive_buffer_errors()
    assert n is None or (isinstance(n, int) and n >= 0)
    if Path("/proc/net/snmp").exists():
        assert isinstance(n, int)


def test_bench_link_rejects_bad_options():
    out = subprocess.run([sys.executable, "-m", "hil", "bench", "link", "--transport", "usb"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert out.returncode != 0 and "--transport" in out.stderr
