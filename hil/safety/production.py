"""The production safety rules, entered in the table (:mod:`hil.safety.table`) at import: the controller
watchdog, the GH stability monitor, the range-of-motion alarm (compiled into the tick, :mod:`hil.safety.rules`)
and the tick-stall watch (in the supervisor, :class:`hil.service.supervisor.StallWatch`).

Their status bits are the contract's (``drivers.core.contract.STATUS_BITS``, recorded and append-only); their
metric names and stop reasons are what dashboards, alerts and controllers read: none of them may change.
"""
from __future__ import annotations

from drivers.core.contract import STATUS_BITS
from hil.safety.rules import GH_ACTIONS, STOP_GH, STOP_ROM, GHMonitor, RangeOfMotion, Watchdog
from hil.safety.table import SafetyRule, Series, StopReason, register
from sim.config_schema import Derived, Key, from_deg, from_ms

MIN_TICK_STALL_TIMEOUT_MS = 250.0
"""The supervisor looks at the tick count every 50 ms, between other work: a shorter stall timeout would take a
scheduling hiccup of a healthy loop for a stall."""

_MEANING = dict(STATUS_BITS)


def _bits(*names: str) -> tuple[tuple[str, str], ...]:
    """Contract status bits with their meaning."""
    return tuple((n, _MEANING[n]) for n in names)


def _hold_ticks(hold_s: float, period_s: float) -> int:
    """A hold in whole ticks: round(hold / T)."""
    return int(round(hold_s / period_s))


def _make_watchdog(cfg, plant, period_s, count) -> Watchdog:
    return Watchdog(cfg.watchdog_timeout_s, period_s, trips=count)


def _make_gh(cfg, plant, period_s, count) -> GHMonitor:
    gh = GHMonitor(cfg.gh_action, cfg.gh_threshold, hold_ticks=_hold_ticks(cfg.gh_zero_hold_s, period_s),
                   alarm_ticks=count)
    if plant.model.has_glenohumeral:     # the MTG arm has no GH model
        gh.prime(plant.outputs.gh_stability)
    return gh


def _make_rom(cfg, plant, period_s, count) -> RangeOfMotion:
    rom = RangeOfMotion(plant.model.dof_ranges, cfg.rom_margin_rad, cfg.rom_action,
                        hold_ticks=_hold_ticks(cfg.rom_zero_hold_s, period_s), alarm_ticks=count)
    rom.prime(plant.outputs.q)
    return rom


def _hold_key(prefix: str, what: str) -> Key:
    return Key(f"{prefix}_zero_hold_ms", "number", 250.0, f"action `zero`: stimulation stays zero this long after "
               f"the last {what} frame", lo=0.0, hi=10000.0, field=f"{prefix}_zero_hold_s", to_si=from_ms)


def _action_key(prefix: str, what: str) -> Key:
    return Key(f"{prefix}_action", "string", "monitor", f"on {what}: `monitor` (count), `zero` (stimulation to "
               "zero while it lasts and for the hold after) or `stop` (end the run, exit status 4)",
               choices=GH_ACTIONS)


WATCHDOG = register(SafetyRule(
    "watchdog", "no valid command or heartbeat from any controller for the timeout: stimulation to zero, until a "
    "new stimulation command",
    keys=(Key("watchdog_timeout_ms", "number", 500.0, "no valid command or heartbeat for this long: stimulation "
              "to zero", lo=1.0, hi=60000.0, field="watchdog_timeout_s", to_si=from_ms),),
    bits=_bits("watchdog"),
    series=(Series("hil_watchdog_trips_total", "counter", "Controller watchdog trips."),),
    count_field="watchdog_trips", count_label="watchdog trips", make=_make_watchdog))

GH_MONITOR = register(SafetyRule(
    "gh", "the GH stability value (paper eq. 9) of each frame above the threshold (NaN counts)",
    keys=(_action_key("gh", "a GH-unstable frame"),
          Key("gh_threshold", "number", 0.0, "stability value above which the joint counts as unstable",
              lo=-1.0, hi=10.0),
          _hold_key("gh", "unstable")),
    bits=_bits("gh_unstable", "gh_zeroed"),
    series=(Series("hil_gh_unstable_ticks_total", "counter", "Ticks with GH stability above the threshold."),),
    count_field="gh_unstable_ticks", count_label="GH unstable ticks", stop_reason=StopReason.GH_UNSTABLE, make=_make_gh, stop_code=STOP_GH,
    explain=lambda gh, plant: gh.describe(plant.outputs.gh_stability)))

RANGE_OF_MOTION = register(SafetyRule(
    "rom", "a joint beyond its range by more than the margin",
    keys=(Key("rom_margin_deg", "number", 5.0, "a joint this far beyond the model's DOF range is in alarm",
              lo=0.0, hi=90.0, field="rom_margin_rad", to_si=from_deg),
          _action_key("rom", "a frame out of range"),
          _hold_key("rom", "out-of-range")),
    bits=_bits("rom_alarm", "rom_zeroed"),
    series=(Series("hil_rom_alarm_ticks_total", "counter", "Ticks with a joint beyond its range plus the margin."),),
    count_field="rom_alarm_ticks", count_label="ROM alarm ticks", stop_reason=StopReason.RANGE_OF_MOTION, make=_make_rom, stop_code=STOP_ROM,
    explain=lambda rom, plant: rom.describe(plant.outputs.q, plant.model.dof_names)))

TICK_STALL = register(SafetyRule(
    "tick_stall", "no tick for the timeout (a controller stuck in step()): the supervisor zeroes, records a stall "
    "and ends the run",
    keys=(Key("tick_stall_timeout_ms", "number",
              Derived("max(watchdog_timeout_ms, 500)",
                      lambda read: max(read["watchdog_timeout_ms"], MIN_TICK_STALL_TIMEOUT_MS * 2)),
              "no tick for this long: the supervisor stops stimulation, records the stall and ends the run",
              lo=MIN_TICK_STALL_TIMEOUT_MS, hi=60000.0, field="tick_stall_timeout_s", to_si=from_ms),),
    series=(Series("hil_tick_stalls_total", "counter", "Runs ended because the loop stopped ticking for longer "
                   "than safety.tick_stall_timeout_ms (a controller stuck in step()); visible until the service "
                   "exits."),
            Series("hil_tick_stalled", "gauge", "1 from a tick stall until the service exits (see "
                   "hil_tick_stalls_total).")),
    stop_reason=StopReason.TICK_STALL))
