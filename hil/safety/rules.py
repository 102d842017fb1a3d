"""Safety functions of the loop, as on a patient: controller watchdog, GH stability monitor, ROM alarms.

All decisions are made on tick indices and plant outputs only (never on wall-clock time), so a replay
of the recorded inputs reproduces them exactly.

- Watchdog: no valid command or heartbeat from any controller for ``timeout_ticks`` ticks -> all
  stimulation forced to zero (counted once per trip). A trip also clears the latched commands (the tick
  engine does it on ``just_tripped``), so after a trip a heartbeat alone keeps stimulation at zero: only
  a new stimulation command switches a channel on again.
- GH monitor (paper eq. 9 stability value of every frame): action ``monitor`` (count, report),
  ``zero`` (stimulation to zero while unstable and for ``gh_zero_hold_s`` after) or ``stop`` (end the run
  at the first unstable frame, non-zero exit status).
- Range-of-motion alarm: a joint beyond its range by more than ``rom_margin_rad``, with the same three
  actions (``zero`` holds for ``rom_zero_hold_s`` after the last frame out of range).
- An extension rule (:class:`FrameAlarm`, entered in :mod:`hil.safety.table`): its compiled test of each frame,
  with the same three actions; its state is a row of the extension rows the tick kernel reads before a step.

The table of rules (keys, status bits, counters, metrics, stop reasons) is :mod:`hil.safety.table`.
"""
from __future__ import annotations

import numpy as np

from drivers.core.contract import (
    STATUS_GH_UNSTABLE,
    STATUS_GH_ZEROED,
    STATUS_OVERRUN,
    STATUS_ROM,
    STATUS_ROM_ZEROED,
    STATUS_STOPPING,
    STATUS_WATCHDOG,
)
from sim.jit.kernel import kernel

GH_ACTIONS = ("monitor", "zero", "stop")


class _LocalCount:
    """A count of its own, for a safety function used without a run's counters (unit tests): the cell
    layout of :class:`hil.telemetry.metrics.MetricCell` (array ``a``, index ``i``)."""

    def __init__(self) -> None:
        self.a, self.i = np.zeros(1), 0

    @property
    def value(self) -> float:
        return float(self.a[self.i])


# -- the rules, compiled: called by the tick kernel (hil.rt.tick_kernel) and by the classes below --------------
WD_LAST_VALID, WD_TRIPPED, WD_JUST_TRIPPED = range(3)
"""A watchdog's state cells (int64): last tick with a valid command (-1: none yet), tripped, just tripped."""
ALARM_ON, ALARM_HOLD_LEFT = range(2)
"""An alarm's state cells (int64): the last frame was in alarm; frames of zero stimulation still to hold."""
MONITOR, ZERO, STOP = range(3)
"""Action codes, in the order of GH_ACTIONS."""


@kernel
def watchdog_update(cells, timeout_ticks, tick, counts, trips_at) -> bool:
    """True while stimulation must be zero (no valid command for ``timeout_ticks`` ticks, or none yet); a
    transition to tripped after a command counts a trip in ``counts[trips_at]``."""
    last = cells[WD_LAST_VALID]
    expired = last < 0 or tick - last >= timeout_ticks
    just = expired and cells[WD_TRIPPED] == 0
    if just and last >= 0:
        counts[trips_at] += 1.0
    cells[WD_JUST_TRIPPED] = 1 if just else 0
    cells[WD_TRIPPED] = 1 if expired else 0
    return expired


@kernel
def alarm_zero_now(cells, action) -> bool:
    """Stimulation must be zero in the coming tick: action ``zero`` or ``stop`` while the last frame was in
    alarm or within ``hold_ticks`` frames after it."""
    return action != MONITOR and (cells[ALARM_ON] != 0 or cells[ALARM_HOLD_LEFT] > 0)


@kernel
def alarm_classify(cells, action, hold_ticks, alarm, counts, ticks_at) -> bool:
    """A new frame in ``alarm`` or not: counted in ``counts[ticks_at]``, the hold restarted or run down.
    True: end the run (action ``stop``)."""
    cells[ALARM_ON] = 1 if alarm else 0
    if alarm:
        counts[ticks_at] += 1.0
        cells[ALARM_HOLD_LEFT] = hold_ticks
    elif cells[ALARM_HOLD_LEFT] > 0:
        cells[ALARM_HOLD_LEFT] -= 1
    return alarm and action == STOP


@kernel
def gh_unstable(gh_stability, threshold) -> bool:
    """Unstable above the threshold; NaN counts as unstable."""
    return not (gh_stability <= threshold)


@kernel
def outside_range(q, lo, hi) -> bool:
    """Any q_i < lo_i or q_i > hi_i (one compiled call per tick instead of four numpy calls)."""
    for i in range(q.shape[0]):
        if q[i] < lo[i] or q[i] > hi[i]:
            return True
    return False


class Watchdog:
    """Tick-based controller watchdog (:func:`watchdog_update`; its state in ``cells``, which the tick kernel
    updates in place)."""

    def __init__(self, timeout_s: float, period_s: float, trips=None) -> None:
        """``trips``: the cell (``a``, ``i``, ``value``) that counts trips, e.g. the run's metrics counter."""
        self.timeout_ticks = max(1, int(round(timeout_s / period_s)))
        self.cells = np.array([-1, 1, 0], np.int64)   # no controller has spoken yet: stimulation stays at zero
        self._cell_views = memoryview(self.cells)   # fed per command without a numpy scalar
        self.counter = trips if trips is not None else _LocalCount()

    @property
    def trips(self) -> int:
        return int(self.counter.value)

    @property
    def tripped(self) -> bool:
        return bool(self.cells[WD_TRIPPED])

    @property
    def just_tripped(self) -> bool:
        """The last update was the transition to tripped."""
        return bool(self.cells[WD_JUST_TRIPPED])

    def feed(self, tick: int) -> None:
        self._cell_views[WD_LAST_VALID] = tick

    def update(self, tick: int) -> bool:
        """True while stimulation must be zero. Counts a trip on each transition to tripped."""
        return watchdog_update(self.cells, self.timeout_ticks, tick, self.counter.a, self.counter.i)



class _AlarmAction:
    """The action of an alarm evaluated on every sensor frame (GH monitor, ROM alarm).

    A frame's value is known only after its plant step, so :meth:`_classify` takes the new frame
    (alarm flag, counter, ``stop`` at once), and :meth:`zero_now` decides before the next step whether
    stimulation must be zero: while the last frame was in alarm and for ``hold_ticks`` frames after it,
    so that ``zero`` does not switch full stimulation back on for single ticks while the joint hovers at
    the limit (on a patient: a train of jerks). The rules are :func:`alarm_zero_now` and
    :func:`alarm_classify`; the state is in ``cells``, which the tick kernel updates in place.
    """

    def __init__(self, kind: str, action: str, hold_ticks: int, alarm_ticks=None) -> None:
        if action not in GH_ACTIONS:
            raise ValueError(f"{kind} action must be one of {GH_ACTIONS}, not {action!r}")
        self.action = action
        self.action_code = GH_ACTIONS.index(action)
        self.hold_ticks = hold_ticks
        self.cells = np.zeros(2, np.int64)
        self.counter = alarm_ticks if alarm_ticks is not None else _LocalCount()

    @property
    def alarm(self) -> bool:
        """The last frame was in alarm."""
        return bool(self.cells[ALARM_ON])

    @property
    def alarm_ticks(self) -> int:
        return int(self.counter.value)

    def _prime(self, alarm: bool) -> None:
        self.cells[ALARM_ON] = alarm
        self.cells[ALARM_HOLD_LEFT] = self.hold_ticks if alarm else 0

    def zero_now(self) -> bool:
        """Stimulation must be zero in the coming tick (actions ``zero`` and ``stop``)."""
        return alarm_zero_now(self.cells, self.action_code)

    def _classify(self, alarm: bool) -> bool:
        return alarm_classify(self.cells, self.action_code, self.hold_ticks, alarm, self.counter.a, self.counter.i)


class GHMonitor(_AlarmAction):
    """Applies the configured action to the GH stability value (paper eq. 9) of each sensor frame:
    unstable above ``threshold`` (NaN counts as unstable)."""

    def __init__(self, action: str, threshold: float = 0.0, hold_ticks: int = 0, alarm_ticks=None) -> None:
        super().__init__("GH", action, hold_ticks, alarm_ticks)
        self.threshold = threshold

    @property
    def unstable(self) -> bool:
        return self.alarm

    @property
    def unstable_ticks(self) -> int:
        return self.alarm_ticks

    def prime(self, gh_stability: float) -> None:
        """The state before the first tick (not counted)."""
        self._prime(gh_unstable(gh_stability, self.threshold))

    def observe(self, gh_stability: float) -> bool:
        """Classify a new frame; True: end the run (action ``stop``)."""
        return self._classify(gh_unstable(gh_stability, self.threshold))

    def describe(self, gh_stability: float) -> str:
        """Why a frame is unstable, for the operator (after a stop; not for the tick)."""
        return f"GH stability {gh_stability:+.3f} above the threshold {self.threshold:+.3f}"


class FrameAlarm(_AlarmAction):
    """An extension rule's alarm: ``test(params, q, qdot, gh_stability)`` (a compiled kernel) on each frame,
    classified after the compiled tick (:meth:`hil.safety.functions.SafetyFunctions.after_step`)."""

    def __init__(self, name: str, test, params: np.ndarray, action: str = "monitor", hold_ticks: int = 0,
                 alarm_ticks=None) -> None:
        super().__init__(name, action, hold_ticks, alarm_ticks)
        self.test, self.params = test, np.ascontiguousarray(params, np.float64)

    def prime(self, q: np.ndarray, qdot: np.ndarray, gh_stability: float) -> None:
        """The frame before the first tick (not counted)."""
        self._prime(self.test(self.params, q, qdot, gh_stability))

    def observe(self, q: np.ndarray, qdot: np.ndarray, gh_stability: float) -> bool:
        """Classify a new frame; True: end the run (action ``stop``)."""
        return self._classify(self.test(self.params, q, qdot, gh_stability))


class RangeOfMotion(_AlarmAction):
    """Alarm when a joint leaves its range by more than a margin; same actions as the GH monitor."""

    def __init__(self, ranges: np.ndarray, margin_rad: float, action: str = "monitor", hold_ticks: int = 0,
                 alarm_ticks=None) -> None:
        super().__init__("ROM", action, hold_ticks, alarm_ticks)
        self.margin_rad = margin_rad
        self.lo = np.asarray(ranges)[:, 0] - margin_rad
        self.hi = np.asarray(ranges)[:, 1] + margin_rad

    def prime(self, q: np.ndarray) -> None:
        """The posture before the first tick (not counted)."""
        self._prime(outside_range(q, self.lo, self.hi))

    def observe(self, q: np.ndarray) -> bool:
        """Classify a new frame; True: end the run (action ``stop``)."""
        return self._classify(outside_range(q, self.lo, self.hi))

    def describe(self, q: np.ndarray, dof_names) -> str:
        """Which joints are out of range and by how much, in degrees (after a stop; not for the tick)."""
        out = [f"{n} {np.degrees(v):.2f} deg (range {np.degrees(lo + self.margin_rad):.1f}..."
               f"{np.degrees(hi - self.margin_rad):.1f} deg, margin {np.degrees(self.margin_rad):.1f} deg)"
               for n, v, lo, hi in zip(dof_names, q, self.lo, self.hi) if v < lo or v > hi]
        return "; ".join(out) if out else "no joint out of range"


# -- the rules of one tick, as the compiled tick (hil.rt.tick_kernel) applies them ---------------------------
STOP_NONE, STOP_GH, STOP_ROM = range(3)
"""What ended a run in a tick: nothing, the GH monitor, the range-of-motion alarm (action ``stop``)."""


def tick_rules(watchdog: Watchdog, gh: GHMonitor, rom: RangeOfMotion, gh_modelled: bool, extensions: tuple) -> tuple:
    """The safety functions' state cells, parameters and counters as the tick kernel takes them (the same
    memory: what the kernel changes, the objects read); ``extensions``: the extension rules' rows
    (:func:`extension_rows`)."""
    return ((watchdog.cells, watchdog.timeout_ticks, watchdog.counter.a, watchdog.counter.i),
            (gh.cells, gh.action_code, gh.hold_ticks, gh.counter.a, gh.counter.i, gh.threshold, gh_modelled),
            (rom.cells, rom.action_code, rom.hold_ticks, rom.counter.a, rom.counter.i, rom.lo, rom.hi),
            extensions)


def extension_rows(alarms, zeroed_bits) -> tuple:
    """(cells (n, 2), action codes (n,), zeroed status bits (n,)) of the extension rules' alarms: each alarm's
    ``cells`` becomes its row, so the tick kernel reads before a step what the alarm classified after one."""
    cells = np.zeros((len(alarms), 2), np.int64)
    for row, alarm in enumerate(alarms):
        cells[row] = alarm.cells
        alarm.cells = cells[row]
    return (cells, np.array([a.action_code for a in alarms], np.int64), np.array(zeroed_bits, np.int64))


@kernel
def rules_before_step(rules, tick, latched, direct):
    """(stimulation must be zero this tick, its status bits): the watchdog's update, whose trip forgets what
    was latched (only a new command stimulates again), and the GH, ROM and extension actions from the last
    frame."""
    (wd_cells, timeout_ticks, wd_counts, wd_at), gh, rom, (ext_cells, ext_actions, ext_bits) = rules
    watchdog = watchdog_update(wd_cells, timeout_ticks, tick, wd_counts, wd_at)
    if wd_cells[WD_JUST_TRIPPED]:
        for c in range(latched.shape[0]):
            for j in range(latched.shape[1]):
                latched[c, j] = 0.0
        for k in range(direct.shape[0]):
            direct[k] = 0.0
    zero_gh, zero_rom = alarm_zero_now(gh[0], gh[1]), alarm_zero_now(rom[0], rom[1])
    bits = 0
    if watchdog:
        bits |= STATUS_WATCHDOG
    if zero_gh:
        bits |= STATUS_GH_ZEROED
    if zero_rom:
        bits |= STATUS_ROM_ZEROED
    zero_ext = False
    for r in range(ext_cells.shape[0]):
        if alarm_zero_now(ext_cells[r], ext_actions[r]):
            zero_ext = True
            bits |= ext_bits[r]
    return watchdog or zero_gh or zero_rom or zero_ext, bits


@kernel
def rules_after_step(rules, q, gh_stability, bits, overrun):
    """(STOP_* code, status bits) of a new frame: the GH monitor (when the plant has a GH joint) and the
    range-of-motion alarm classify it; the status adds their alarms, the overrun and the stop."""
    _, gh, rom, _ = rules
    gh_cells, gh_action, gh_hold, gh_counts, gh_at, threshold, gh_modelled = gh
    rom_cells, rom_action, rom_hold, rom_counts, rom_at, lo, hi = rom
    stop_gh = False
    if gh_modelled:
        stop_gh = alarm_classify(gh_cells, gh_action, gh_hold, gh_unstable(gh_stability, threshold), gh_counts, gh_at)
    stop_rom = alarm_classify(rom_cells, rom_action, rom_hold, outside_range(q, lo, hi), rom_counts, rom_at)
    stop = STOP_GH if stop_gh else (STOP_ROM if stop_rom else STOP_NONE)
    if gh_cells[ALARM_ON]:
        bits |= STATUS_GH_UNSTABLE
    if rom_cells[ALARM_ON]:
        bits |= STATUS_ROM
    if overrun:
        bits |= STATUS_OVERRUN
    if stop != STOP_NONE:
        bits |= STATUS_STOPPING
    return stop, bits
