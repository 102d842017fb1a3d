"""The monitoring stack of monitoring/ against the real things: promtool checks and unit-tests the rules and
the scrape config, every PromQL expression of the dashboard and the rules names only series the service
exports (hil.telemetry.metrics) or the recording rules define, and a real Prometheus server scrapes a real `hil run`
and evaluates the rules. Debian's prometheus package provides the binaries (tests/system-deps.sh)."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml  # PyYAML, a dependency of dask/distributed
from helpers import free_port, metrics_port, wait_for_port_file

from hil.config import MetricsConfig
from hil.telemetry.metrics import default_schema

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_DIR = ROOT / "monitoring" / "prometheus"
RULES = PROMETHEUS_DIR / "rules.yml"
RULES_TEST = PROMETHEUS_DIR / "rules_test.yml"
SCRAPE_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
DASHBOARD = ROOT / "monitoring" / "grafana" / "fes-hil-dashboard.json"
SYSTEM_DEPS = ROOT / "tests" / "system-deps.sh"
JOB = "fes-hil"
TARGET_LABELS = {"instance", "job"}     # added by Prometheus to every scraped series


# -- the binaries ------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def prometheus_bin() -> dict:
    """{"prometheus": path, "promtool": path}; installed by tests/system-deps.sh if missing. Skips only where
    they cannot be installed, and fails instead under CI (which installs them)."""
    def found():
        return {name: shutil.which(name) for name in ("prometheus", "promtool")}
    paths = found()
    output = ""
    if not all(paths.values()):
        try:
            out = subprocess.run(["sh", str(SYSTEM_DEPS)], capture_output=True, text=True, timeout=900)
            output = (out.stdout + out.stderr).strip()
        except (OSError, subprocess.TimeoutExpired) as exc:
            output = str(exc)
        paths = found()
    if not all(paths.values()):
        reason = (f"prometheus/promtool not found and `sh tests/system-deps.sh` could not install Debian's "
                  f"prometheus package: {output.splitlines()[-1] if output else 'no output'}")
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)
        pytest.skip(reason)
    return paths


def promtool(paths: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([paths["promtool"], *args], capture_output=True, text=True, timeout=120,
                          cwd=PROMETHEUS_DIR)


def test_promtool_checks_the_rules_and_the_scrape_config(prometheus_bin):
    rules = promtool(prometheus_bin, "check", "rules", str(RULES))
    assert rules.returncode == 0, rules.stdout + rules.stderr
    config = promtool(prometheus_bin, "check", "config", str(SCRAPE_CONFIG))
    assert config.returncode == 0, config.stdout + config.stderr
    assert "1 rule files found" in config.stdout + config.stderr


def test_promtool_unit_tests_of_the_rules_pass(prometheus_bin):
    """The thresholds on synthetic series (rules_test.yml): lateness p99.9, deadline misses, GH-unstable
    ticks, a watchdog trip, a safety stop followed by the target going down, a missing target."""
    out = promtool(prometheus_bin, "test", "rules", str(RULES_TEST))
    assert out.returncode == 0 and "SUCCESS" in out.stdout, out.stdout + out.stderr


def shipped_target_files(job: dict) -> list[str]:
    """The file_sd patterns of the shipped job, resolved as Prometheus does (relative to its config file)."""
    return [os.path.normpath(PROMETHEUS_DIR / f) for sd in job["file_sd_configs"] for f in sd["files"]]


# -- names in the expressions ------------------------------------------------------------------------------
def exported_series() -> tuple[set[str], set[str]]:
    """(series names as scraped, label names) of every series the service can export."""
    names, labels = set(), set(TARGET_LABELS)
    for spec in default_schema(["0:loopback"], ["amplitude_limit"], ["ch1"]):
        labels.update(spec.labelnames)
        if spec.kind == "histogram":
            names.update(spec.name + suffix for suffix in ("_bucket", "_sum", "_count"))
            labels.add("le")
        else:
            names.add(spec.name)
    return names, labels


def load_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def recording_rule_names() -> set[str]:
    return {r["record"] for r in load_rules() if "record" in r}


_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{([^}]*)\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_MATCHER_LABEL = re.compile(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)")
_IDENTIFIER = re.compile(r"(?<![\w:.$])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")   # not a function call
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan"}


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """(series names, label names) a PromQL expression (with Grafana's $variables) refers to."""
    labels: set[str] = set()
    text = _STRING.sub('""', expr)
    for m in _MATCHERS.finditer(text):
        labels.update(_MATCHER_LABEL.findall(m.group(1)))
    text = _RANGE.sub("", _MATCHERS.sub("", text))
    for m in _GROUPING.finditer(text):
        labels.update(x.strip() for x in m.group(1).split(",") if x.strip())
    text = _GROUPING.sub(" ", text)
    names = {n for n in _IDENTIFIER.findall(text) if n.lower() not in _KEYWORDS}
    return names, labels


def test_promql_names_finds_series_and_labels():
    names, labels = promql_names('sum by (le) (rate(hil_tick_latenes_seconds_bucket{instance="$instance"}'
                                 '[$__rate_interval])) > 1e-3 and on (job) up{job=~"a|b"} offset 5m')
    assert names == {"hil_tick_latenes_seconds_bucket", "up"} and labels == {"le", "instance", "job"}


def dashboard_queries(dashboard: dict) -> list[tuple[str, str, str]]:
    """(where, expr, legend) of every query: panel targets (rows' nested panels too) and variables."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((f"panel {p['title']!r} {t['refId']}", t["expr"], t.get("legendFormat", "")))
            walk(p.get("panels", []))
    walk(dashboard["panels"])
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", v["definition"])
            assert m, f"variable {v['name']}: unexpected query {v['definition']!r}"
            out.append((f"variable {v['name']}", f"{m.group(1)}{{{m.group(2)}!=''}}", ""))
    return out


def unknown_names(where: str, expr: str, legend: str, series: set[str], labels: set[str]) -> list[str]:
    names, used_labels = promql_names(expr)
    used_labels |= set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
    return ([f"{where}: series {n!r} is neither exported by hil.telemetry.metrics nor a recording rule" for n in names - series]
            + [f"{where}: label {n!r} is not exported" for n in used_labels - labels])


def test_dashboard_and_rules_use_only_exported_series_and_recording_rules():
    """A renamed metric or label (in hil.telemetry.metrics or the rules) breaks this test."""
    exported, labels = exported_series()
    records = recording_rule_names()
    dashboard = json.loads(DASHBOARD.read_text())
    queries = dashboard_queries(dashboard)
    rule_queries = [(f"rule {r.get('record') or r['alert']}", r["expr"], "") for r in load_rules()]
    problems = []
    for where, expr, legend in queries:
        problems += unknown_names(where, expr, legend, exported | records, labels)
    for where, expr, legend in rule_queries:   # recording rules build on exported series and earlier rules
        problems += unknown_names(where, expr, legend, exported | records | {"up"}, labels)
    assert not problems, "\n".join(problems)
    used = set().union(*(promql_names(e)[0] for _, e, _ in queries + rule_queries))
    assert records <= used, f"recording rules nothing uses: {sorted(records - used)}"
    assert len(queries) >= 30


def test_dashboard_is_a_current_grafana_dashboard_over_a_datasource_variable():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 42 and dashboard["uid"] and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["DS_PROMETHEUS"]["type"] == "datasource" and variables["DS_PROMETHEUS"]["query"] == "prometheus"
    ids, cells = set(), set()
    for p in dashboard["panels"]:
        assert p["id"] not in ids, f"duplicate panel id {p['id']}"
        ids.add(p["id"])
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not area & cells, f"panel {p['title']!r} overlaps another"
        cells |= area
        if p["type"] != "row":
            assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
            assert p["targets"] and all(t["datasource"] == p["datasource"] for t in p["targets"]), p["title"]


def test_every_alert_tells_the_operator_what_it_means():
    alerts = [r for r in load_rules() if "alert" in r]
    names = {a["alert"] for a in alerts}
    assert {"FesHilServiceDown", "FesHilTargetMissing", "FesHilSafetyStop", "FesHilGhUnstable", "FesHilWatchdogTrip",
            "FesHilDeadlineMiss", "FesHilTickLatenessHigh"} <= names
    for a in alerts:
        assert "for" in a and a["labels"]["severity"] in ("critical", "warning", "info"), a["alert"]
        assert a["annotations"]["summary"] and len(a["annotations"]["description"]) > 80, a["alert"]
    config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    [job] = config["scrape_configs"]
    assert job["job_name"] == JOB and job["static_configs"][0]["targets"] == ["127.0.0.1:9108"]
    assert config["rule_files"] == ["rules.yml"]
    assert shipped_target_files(job) == [str(ROOT / MetricsConfig().targets_directory / "*.json")]
    for a in alerts:
        if "up{" in a["expr"]:
            assert f'job="{JOB}"' in a["expr"], a["alert"]


# -- the safety-stop series --------------------------------------------------------------------------------
@pytest.mark.parametrize("gh_action, stops", [("stop", 1.0), ("monitor", 0.0)])
def test_a_safety_stop_is_exported(config_over, gh_action, stops):
    """hil_safety_stops_total is 1 after a GH 'stop' ended the run (the loop syncs its metrics once more
    after its last tick, as here), 0 after a run that was not stopped."""
    from drivers.core.contract import REJECT_REASONS
    from hil.config import load_service_config
    from hil.rt.offline import run_offline
    from hil.telemetry.metrics import LoopMetrics, MetricsBlock, MetricsSchema

    cfg = load_service_config(config_over("elbow-hold.toml", f"""
        [safety]
        gh_action = "{gh_action}"
        gh_threshold = -0.5
        """))
    block = MetricsBlock.private(MetricsSchema(default_schema(["0:loopback"], list(REJECT_REASONS))))
    metrics = LoopMetrics(block, ["0:loopback"], cfg.loop.period_s)
    seen = {}

    class KeepEngine:
        def on_tick(self, record, engine, actuation_ns):
            seen["engine"] = engine
    result = run_offline(cfg, 100, [metrics, KeepEngine()])
    metrics.sync(seen["engine"], 10**9)
    assert (result.stopped_by == "gh_unstable") == (gh_action == "stop"), result
    assert block.counter("hil_safety_stops_total").value == stops


# -- the project's own installation ------------------------------------------------------------------------
def test_readme_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"^\s*(sh tests/system-deps\.sh && .*pytest.*)$", readme, re.M)
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if line.strip() and not line.startswith("#")]
    assert len(commands) == 1 and commands[0].strip() == ci[-1], (commands, ci[-1])


def test_system_deps_script_is_quick_once_installed(prometheus_bin):
    syntax = subprocess.run(["sh", "-n", str(SYSTEM_DEPS)], capture_output=True, text=True, timeout=30)
    assert syntax.returncode == 0, syntax.stderr
    t0 = time.monotonic()
    out = subprocess.run(["sh", str(SYSTEM_DEPS)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "all present" in out.stdout, out.stdout + out.stderr
    assert time.monotonic() - t0 < 5


# -- a live Prometheus scraping a real run -----------------------------------------------------------------
def http_json(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


def query(port: int, expr: str) -> list[dict]:
    """The instant vector of ``expr`` ([] while Prometheus cannot answer)."""
    try:
        got = http_json(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    except OSError:
        return []
    return got["data"]["result"] if got.get("status") == "success" else []


def stop(proc: subprocess.Popen | None, sig: int = signal.SIGTERM, wait_s: float = 30.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(sig)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def tail(path: Path, n: int = 2000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


def unrecorded_run_config(config_over, metrics_port: int, targets):
    """The elbow-hold config with metrics on ``metrics_port``, target files in ``targets``, no recording."""
    return config_over("elbow-hold.toml", f"""
        [metrics]
        port = {metrics_port}
        targets_directory = "{targets}"
        [recording]
        enabled = false
        """)


def test_live_prometheus_scrapes_a_real_run_and_evaluates_the_rules(prometheus_bin, tmp_path, config_over, held_port):
    """Prometheus (0.5 s scrapes and rule evaluations, the shipped job, its file_sd pointed at the test's
    target directory, and the shipped rules) scrapes an 8 s elbow-hold run whose configured metrics port is
    taken: the run announces the free port it took in its target file, and the tick counter advances between
    queries, recording rules have values, every rule evaluates without error."""
    prom_port = free_port()
    targets = tmp_path / "targets"
    run_config = unrecorded_run_config(config_over, held_port, targets)
    prom_config = yaml.safe_load(SCRAPE_CONFIG.read_text())
    prom_config["global"].update(scrape_interval="500ms", scrape_timeout="500ms", evaluation_interval="500ms")
    prom_config["rule_files"] = [str(RULES)]
    [job] = prom_config["scrape_configs"]
    del job["static_configs"]        # only this run: not a `hil serve` that may hold 9108 on this machine
    assert len(job["file_sd_configs"]) == 1
    job["file_sd_configs"][0]["files"] = [str(targets / "*.json")]
    targets.mkdir()                  # watched from the start (as on a bench PC after its first run)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(prom_config))
    prom_log, run_out, run_err = tmp_path / "prometheus.log", tmp_path / "run.out", tmp_path / "run.err"
    base = f"http://127.0.0.1:{prom_port}"
    prom = run = None
    try:
        with open(prom_log, "w") as log:
            prom = subprocess.Popen([prometheus_bin["prometheus"], f"--config.file={tmp_path / 'prometheus.yml'}",
                                     f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                     f"--web.listen-address=127.0.0.1:{prom_port}"],
                                    stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
        t_end = time.monotonic() + 60
        while True:
            assert prom.poll() is None, f"prometheus exited:\n{tail(prom_log)}"
            assert time.monotonic() < t_end, f"prometheus not ready after 60 s:\n{tail(prom_log)}"
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.2)
        with open(run_out, "w") as out, open(run_err, "w") as err:
            run = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(run_config), "--duration", "8",
                                    "--port-file", str(tmp_path / "ports.json")], stdout=out, stderr=err, cwd=tmp_path)
        exporter = f"127.0.0.1:{metrics_port(wait_for_port_file(tmp_path / 'ports.json', run, timeout=180))}"
        assert exporter != f"127.0.0.1:{held_port}"
        assert json.loads((targets / f"hil-{run.pid}.json").read_text()) == [{"targets": [exporter]}]
        ticks, rate, p999, stops = [], [], [], []
        t_end = time.monotonic() + 180
        while not (len(set(ticks)) >= 2 and rate and p999 and stops):
            assert time.monotonic() < t_end, f"not seen in 180 s: ticks {ticks[-3:]}, rule {rate}, p99.9 {p999}"
            assert run.poll() is None, (f"hil run exited ({run.returncode}) before Prometheus saw it:\n"
                                        f"{tail(run_err)}\nprometheus:\n{tail(prom_log)}")
            got = query(prom_port, f'hil_ticks_total{{job="{JOB}"}}')
            if got and float(got[0]["value"][1]) > 0 and (not ticks or float(got[0]["value"][1]) > ticks[-1]):
                ticks.append(float(got[0]["value"][1]))
            rate = [s for s in query(prom_port, "instance:hil_ticks:rate1m") if float(s["value"][1]) > 0]
            p999 = query(prom_port, "instance:hil_tick_lateness_seconds:p999_1m")
            stops = query(prom_port, f'hil_safety_stops_total{{job="{JOB}"}} == 0')
            time.sleep(0.3)
        assert ticks[-1] > ticks[0], ticks
        assert rate[0]["metric"]["job"] == JOB and rate[0]["metric"]["instance"] == exporter
        time.sleep(1.0)      # every group evaluated at least once more
        rules = http_json(f"{base}/api/v1/rules")["data"]["groups"]
        evaluated = {r["name"]: (r["health"], r.get("lastError", "")) for g in rules for r in g["rules"]}
        assert set(evaluated) == {r.get("record") or r["alert"] for r in load_rules()}
        bad = {name: h for name, h in evaluated.items() if h[0] != "ok"}
        assert not bad, bad
        up = query(prom_port, f'up{{job="{JOB}"}}')
        assert up and up[0]["value"][1] == "1", up
        assert run.wait(120) == 0, tail(run_err)
        assert not (targets / f"hil-{run.pid}.json").exists()     # the run's entry goes with it
    finally:
        stop(run)
        stop(prom, wait_s=15.0)


def test_metrics_stay_up_after_a_safety_stop_so_a_scrape_sees_it(config_over, tmp_path):
    """A real `hil run` ended by a GH stop: /metrics serves hil_safety_stops_total 1 for the linger time
    before the service exits (without it the exporter went away within a second of the stop)."""
    linger_ms = 3000
    cfg = config_over("elbow-hold.toml", f"""
        [safety]
        gh_action = "stop"
        gh_threshold = -0.5
        [metrics]
        port = 0
        targets_directory = "{tmp_path / 'targets'}"
        linger_after_stop_ms = {linger_ms}
        [recording]
        enabled = false
        """)
    proc = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "20",
                             "--port-file", str(tmp_path / "ports.json")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        port = metrics_port(wait_for_port_file(tmp_path / "ports.json", proc))
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=1).read().decode()
            except OSError:
                text = ""
            if "\nhil_safety_stops_total 1.0" in text:
                seen.append(time.monotonic())
            time.sleep(0.05)
    finally:
        proc.kill()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 4, err                          # exit 4: a safety stop
    assert seen and seen[-1] - seen[0] >= 0.5 * linger_ms / 1000.0


# -- the metrics port ----------------------------------------------------------------------------------------
def exporter_pid(supervisor_pid: int) -> int | None:
    """The pid of the `hil-exporter` child of ``supervisor_pid`` (None: none now)."""
    for child in Path(f"/proc/{supervisor_pid}/task/{supervisor_pid}/children").read_text().split():
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == "hil-exporter":
                return int(child)
        except OSError:
            continue
    return None


def scrape_ticks(port: int) -> float | None:
    """hil_ticks_total served on ``port`` (None: nothing answers)."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    found = re.search(r"^hil_ticks_total (\S+)$", text, re.M)
    return float(found.group(1)) if found else None


def test_run_takes_a_free_port_when_the_configured_one_is_taken(tmp_path, config_over, held_port):
    """With the configured metrics port held by another process, `hil run` serves /metrics on a free port,
    names it (and the holder) on stderr, in --port-file and in its own file_sd target file, keeps it when its
    exporter is killed and restarted, and removes the target file at the end."""
    targets = tmp_path / "targets"
    cfg = unrecorded_run_config(config_over, held_port, targets)
    run = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "10",
                            "--port-file", str(tmp_path / "ports.json")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        port = metrics_port(wait_for_port_file(tmp_path / "ports.json", run))
        target_file = targets / f"hil-{run.pid}.json"
        assert port != held_port
        assert json.loads(target_file.read_text()) == [{"targets": [f"127.0.0.1:{port}"]}]
        assert scrape_ticks(port) is not None
        first = exporter_pid(run.pid)
        os.kill(first, signal.SIGKILL)
        t_end = time.monotonic() + 60
        while exporter_pid(run.pid) in (None, first) or scrape_ticks(port) is None:
            assert run.poll() is None and time.monotonic() < t_end, "no exporter on the same port after a restart"
            time.sleep(0.1)
        _, err = run.communicate(timeout=120)
    finally:
        stop(run)
    assert run.returncode == 0, err
    assert f"hil: metrics at http://127.0.0.1:{port}/metrics (port {held_port} is taken by pid {os.getpid()}" in err
    assert not target_file.exists()


def test_run_with_metrics_port_takes_exactly_that_port(tmp_path, config_over, held_port):
    """`hil run --metrics-port N` listens on N or fails at once (exit 2) naming the holder."""
    cfg = config_over("elbow-hold.toml", "[recording]\nenabled = false\n")
    out = subprocess.run([sys.executable, "-m", "hil", "run", "--config", str(cfg), "--duration", "0.1",
                          "--metrics-port", str(held_port)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert f"pid {os.getpid()}" in out.stderr and "--metrics-port" in out.stderr


def test_serve_on_a_taken_port_names_the_holder_and_exits_2(tmp_path, config_over, held_port):
    """`hil serve` keeps its configured port (Prometheus scrapes it there): if it is taken, one line says
    which process holds it and what to do, exit 2, before anything else starts."""
    cfg = unrecorded_run_config(config_over, held_port, tmp_path / "targets")
    out = subprocess.run([sys.executable, "-m", "hil", "serve", "--config", str(cfg)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    [line] = out.stderr.strip().splitlines()
    assert line.startswith("Error: ") and f"127.0.0.1:{held_port}" in line, line
    own_command = Path(f"/proc/{os.getpid()}/cmdline").read_bytes().split(b"\0")[0].decode()
    assert f"held by pid {os.getpid()}: {own_command}" in line and "[metrics] port" in line, line
    assert not (tmp_path / "targets").exists()


def test_target_files_are_one_per_run_and_those_of_dead_runs_are_removed(tmp_path):
    from hil.telemetry.metrics_port import TargetFile

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f"hil-{dead.pid}.json").write_text('[{"targets": ["127.0.0.1:1"]}]')     # a killed run's
    other = tmp_path / f"hil-{os.getppid()}.json"                                          # a live run's
    other.write_text('[{"targets": ["127.0.0.1:2"]}]')
    target = TargetFile(str(tmp_path), "127.0.0.1:3")
    target.write()
    assert json.loads(target.path.read_text()) == [{"targets": ["127.0.0.1:3"]}]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([target.path.name, other.name])
    target.remove()
    assert sorted(p.name for p in tmp_path.iterdir()) == [other.name]
