"""Shared-memory metrics and the exporter process, scraped over real HTTP and parsed."""
import multiprocessing as mp
import socket
import urllib.request

import pytest
from helpers import free_port
from prometheus_client.parser import text_string_to_metric_families

from hil.telemetry.exporter import start_exporter
from hil.telemetry.metrics import MetricsBlock, MetricsError, MetricSpec, MetricsSchema, default_schema


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {s.name + str(sorted(s.labels.items())): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_values_written_here_are_scraped_from_the_exporter_process():
    block = MetricsBlock.create(MetricsSchema(default_schema(["0:loopback"], ["amplitude_limit"])))
    port = free_port()
    proc = start_exporter(block, "127.0.0.1", port, mp.get_context("spawn"))
    try:
        block.counter("hil_ticks_total").inc(5)
        block.counter("hil_commands_rejected_total", driver="0:loopback", reason="amplitude_limit").inc()
        block.gauge("hil_gh_stability").set(-0.62)
        h = block.histogram("hil_tick_lateness_seconds")
        for v in (3e-6, 1.5e-4, 0.2):
            h.observe(v)
        got = scrape(port)
        assert got["hil_ticks_total[]"] == 5
        assert got["hil_commands_rejected_total[('driver', '0:loopback'), ('reason', 'amplitude_limit')]"] == 1
        assert got["hil_gh_stability[]"] == -0.62
        assert got["hil_tick_lateness_seconds_count[]"] == 3
        assert got["hil_tick_lateness_seconds_sum[]"] == pytest.approx(0.200153)
        assert got["hil_tick_lateness_seconds_bucket[('le', '1e-05')]"] == 1
        assert got["hil_tick_lateness_seconds_bucket[('le', '0.0002')]"] == 2
        assert got["hil_tick_lateness_seconds_bucket[('le', '+Inf')]"] == 3
    finally:
        proc.terminate()
        proc.join(10)
        block.release()
    assert proc.exitcode is not None


def test_port_in_use_is_a_clear_error():
    block = MetricsBlock.create(MetricsSchema(default_schema([], [])))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(MetricsError, match=f"127.0.0.1:{port}"):
            start_exporter(block, "127.0.0.1", port, mp.get_context("spawn"))
    block.release()


@pytest.mark.parametrize("spec, words", [
    (MetricSpec("hil_ticks", "counter", "x"), "_total"),
    (MetricSpec("hil_lat", "histogram", "x", buckets=(1.0,)), "_seconds"),
    (MetricSpec("bad-name", "gauge", "x"), "invalid"),
])
def test_schema_enforces_names(spec, words):
    with pytest.raises(ValueError, match=words):
        MetricsSchema([spec])


def test_unknown_series_is_an_error_when_resolving_a_handle():
    block = MetricsBlock.create(MetricsSchema(default_schema(["0:loopback"], ["non_finite"])))
    try:
        with pytest.raises(KeyError):
            block.counter("hil_commands_received_total", driver="9:can")
        with pytest.raises(KeyError):
            block.counter("hil_nope_total")
    finally:
        block.release()


def test_bench_loop_reports_lateness_while_scraping():
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "hil", "bench", "loop", "--period", "0.004", "--duration", "1",
                          "--scrape-interval", "0.1", "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["ticks"] == 250 and doc["scrapes"] > 0 and doc["scrape_failures"] == 0
    assert doc["p50_us"] <= doc["p99_us"] <= doc["p999_us"] <= doc["max_us"]
    assert doc["misses_over_1ms"] <= doc["deadline_misses"] + doc["ticks"] and 0 < doc["cpu_percent"] <= 100


def test_hil_run_with_the_metrics_port_in_use_exits_2_without_an_empty_recording(tmp_path, config_over):
    """With --metrics-port (exactly that port); without it a run takes a free port (test_monitoring.py)."""
    import subprocess
    import sys
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        cfg = config_over("elbow-hold.toml", f"[metrics]\nport = {port}\n")
        rec = tmp_path / "run.hilrec"
        out = subprocess.run([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "0.2",
                              "--record", str(rec), "--metrics-port", str(port)],
                             capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and f"127.0.0.1:{port}" in out.stderr, out.stderr
    assert not rec.exists()
