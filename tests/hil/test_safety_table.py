"""The safety rules as one table (hil.safety.table): a rule added in a test, without editing any other module,
appears in the config keys, the status bits, the counters, the metrics and the stop reasons, and stops a run;
the production rules agree with the contract's status bits and the exporter's series."""
from __future__ import annotations

import math

import numba
import numpy as np
import pytest
import typer

from drivers.core import contract
from hil.cli.run import _run_exit
from hil.config import load_service_config, service_config_from_dict
from hil.rt.offline import run_offline
from hil.rt.sensor import ELBOW
from hil.safety import table
from hil.safety.rules import GH_ACTIONS, FrameAlarm
from hil.service.run_result import RunResult
from hil.telemetry.counters import RunCounters
from hil.telemetry.exporter import ShmCollector
from hil.telemetry.metrics import MetricsBlock, MetricsSchema, default_schema
from sim.config_schema import Key, from_deg
from sim.das3.config import ConfigError


@numba.njit
def elbow_too_fast(params, q, qdot, gh_stability):
    """|elbow flexion velocity| > params[0] (rad/s)."""
    return abs(qdot[ELBOW]) > params[0]


def _make_elbow_speed(cfg, plant, period_s, count) -> FrameAlarm:
    return FrameAlarm("elbow_speed", elbow_too_fast, np.array([cfg.elbow_speed_limit_rad_s]), cfg.elbow_speed_action,
                      hold_ticks=0, alarm_ticks=count)


ELBOW_SPEED = table.SafetyRule(
    "elbow_speed", "the elbow flexes or extends faster than a limit",
    keys=(Key("elbow_speed_limit_deg_s", "number", 1000.0, "elbow velocity above which a frame is in alarm",
              lo=0.0, hi=5000.0, field="elbow_speed_limit_rad_s", to_si=from_deg),
          Key("elbow_speed_action", "string", "monitor", "monitor, zero or stop", choices=GH_ACTIONS)),
    bits=(("elbow_speed", "the elbow moves faster than the limit"),
          ("elbow_speed_zeroed", "elbow speed action 'zero' holds stimulation at zero")),
    series=(table.Series("hil_elbow_speed_ticks_total", "counter", "Ticks with the elbow faster than the limit."),),
    count_field="elbow_speed_ticks", count_label="elbow speed ticks", stop_reason="elbow_speed",
    make=_make_elbow_speed, alarm=elbow_too_fast,
    explain=lambda alarm, plant: f"elbow velocity {math.degrees(plant.outputs.qdot[ELBOW]):+.1f} deg/s")

LOOPBACK = "loopback.toml"     # direct excitation: the elbow flexes within the first second


@pytest.fixture
def elbow_speed():
    with table.registered(ELBOW_SPEED) as rule:
        yield rule


def test_a_toy_rule_appears_in_config_keys_bits_counters_metrics_and_stop_reasons(elbow_speed):
    cfg = service_config_from_dict({"safety": {"elbow_speed_limit_deg_s": 90.0, "elbow_speed_action": "zero"}}, "t")
    assert cfg.safety.elbow_speed_limit_rad_s == math.radians(90.0) and cfg.safety.elbow_speed_action == "zero"
    assert cfg.safety.watchdog_timeout_s == 0.5                          # the production keys are unchanged
    assert "| `elbow_speed_limit_deg_s` | deg/s | `1000` | [0, 5000] |" in table.section().markdown()
    assert "| elbow_speed | `elbow_speed_limit_deg_s`, `elbow_speed_action` | `elbow_speed`, `elbow_speed_zeroed` | " \
           "`hil_elbow_speed_ticks_total` | `elbow_speed` |" in table.rules_markdown()
    with pytest.raises(ConfigError, match=r"safety.elbow_speed_action.: must be one of monitor, zero, stop, not .brake."):
        service_config_from_dict({"safety": {"elbow_speed_action": "brake"}}, "t")

    n = len(contract.STATUS_BITS)
    assert table.status_bit_names()[n:] == ("elbow_speed", "elbow_speed_zeroed")
    assert table.status_bit("elbow_speed_zeroed") == 1 << (n + 1)

    counters = RunCounters.private()
    counters.elbow_speed_ticks.inc(3)
    assert counters.block.counter("hil_elbow_speed_ticks_total").value == 3.0
    assert "hil_elbow_speed_ticks_total" in {s.name for s in default_schema(["0:loopback"], ["non_finite"])}

    assert "elbow_speed" in table.stop_reasons() and "elbow_speed" in table.safety_stop_reasons()
    summary = RunResult(ok=True, stopped_by="elbow_speed", safety_counts={"elbow_speed_ticks": 1})
    assert summary.to_dict()["elbow_speed_ticks"] == 1 and summary.watchdog_trips == 0
    with pytest.raises(typer.Exit) as ended:
        _run_exit(summary)
    assert ended.value.exit_code == 4                                     # a safety stop


def test_without_the_toy_rule_nothing_of_it_remains():
    with table.registered(ELBOW_SPEED):
        pass
    with pytest.raises(ConfigError, match="elbow_speed_action"):
        service_config_from_dict({"safety": {"elbow_speed_action": "stop"}}, "t")
    assert "elbow_speed" not in table.status_bit_names() and "elbow_speed" not in table.stop_reasons()
    assert "hil_elbow_speed_ticks_total" not in {s.name for s in default_schema([], [])}


def test_a_toy_rule_stops_a_run(elbow_speed, config_over):
    path = config_over(LOOPBACK, """
        [safety]
        elbow_speed_limit_deg_s = 20.0
        elbow_speed_action = "stop"
        """)
    records = []

    class Keep:
        def on_tick(self, record, engine, actuation_ns):
            records.append((record.copy(), engine.counters.elbow_speed_ticks.value))

    result = run_offline(load_service_config(path), 500, [Keep()])
    assert result.stopped_by == "elbow_speed" and result.ticks < 500, result
    assert result.stop_detail.startswith("elbow velocity ")
    last, count = records[-1]
    status = int(last["frame"]["status"][0])
    assert status & table.status_bit("elbow_speed") and status & contract.STATUS_STOPPING and count == 1
    assert abs(math.degrees(last["frame"]["qdot"][0, ELBOW])) > 20.0
    assert not any(int(r["frame"]["status"][0]) & table.status_bit("elbow_speed") for r, _ in records[:-1])


def test_a_toy_rule_zeroes_stimulation_after_its_alarm(elbow_speed, config_over):
    """Action 'zero': the tick after a frame in alarm applies no excitation and says so in its status."""
    path = config_over(LOOPBACK, """
        [safety]
        elbow_speed_limit_deg_s = 20.0
        elbow_speed_action = "zero"
        """)
    records = []

    class Keep:
        def on_tick(self, record, engine, actuation_ns):
            records.append(record.copy())

    result = run_offline(load_service_config(path), 400, [Keep()])
    assert result.stopped_by == "duration"
    status = np.array([int(r["frame"]["status"][0]) for r in records])
    alarm = (status & table.status_bit("elbow_speed")) != 0
    zeroed = (status & table.status_bit("elbow_speed_zeroed")) != 0
    first = int(np.argmax(alarm))
    assert alarm.any() and zeroed[first + 1] and not zeroed[:first + 1].any()
    assert records[first + 1]["u"].max() == 0.0 and records[first]["u"].max() > 0.0


def test_the_table_agrees_with_the_contract_bits_and_the_exporter_series():
    rule_bits = [b for r in table.rules() for b, _ in r.bits]
    assert sorted(rule_bits + list(table.LOOP_STATUS_BITS)) == sorted(n for n, _ in contract.STATUS_BITS)
    masks = {"watchdog": contract.STATUS_WATCHDOG, "gh_unstable": contract.STATUS_GH_UNSTABLE,
             "overrun": contract.STATUS_OVERRUN, "rom_alarm": contract.STATUS_ROM,
             "gh_zeroed": contract.STATUS_GH_ZEROED, "stopping": contract.STATUS_STOPPING,
             "rom_zeroed": contract.STATUS_ROM_ZEROED}
    assert {name: table.status_bit(name) for name in masks} == masks

    block = MetricsBlock.private(MetricsSchema(default_schema(["0:loopback"], ["non_finite"])))
    served = {family.name + ("_total" if family.type == "counter" else ""): (family.type, family.documentation)
              for family in ShmCollector(block).collect()}
    for series in table.metric_series():
        assert served[series.name] == (series.kind, series.help)
    assert {s.name for s in table.metric_series()} >= {"hil_watchdog_trips_total", "hil_gh_unstable_ticks_total",
                                                       "hil_rom_alarm_ticks_total", "hil_tick_stalls_total",
                                                       "hil_tick_stalled"}
    assert set(table.safety_stop_reasons()) == {"gh_unstable", "range_of_motion", "tick_stall"}
    summary = RunResult(ok=True).to_dict()
    assert [k for k in summary if k.endswith(("_trips", "_ticks"))] == ["watchdog_trips", "gh_unstable_ticks",
                                                                         "rom_alarm_ticks"]
