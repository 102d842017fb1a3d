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
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

GH_ACTIONS = ("monitor", "zero", "stop")


@dataclass(frozen=True)
class SafetyConfig:
    watchdog_timeout_s: float = 0.5
    gh_action: str = "monitor"
    gh_threshold: float = 0.0          # stability value above which the joint counts as unstable
    gh_zero_hold_s: float = 0.25       # action 'zero': stimulation stays zero this long after the last unstable frame
    rom_margin_rad: float = 0.0873     # 5 deg beyond the model's DOF range
    rom_action: str = "monitor"        # monitor | zero | stop
    rom_zero_hold_s: float = 0.25      # action 'zero': stimulation stays zero this long after the last alarm frame


class _LocalCount:
    """A count of its own, for a safety function used without a run's counters (unit tests)."""

    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        self.value += 1


class Watchdog:
    """Tick-based controller watchdog."""

    def __init__(self, timeout_s: float, period_s: float, trips=None) -> None:
        """``trips``: the cell (``inc``/``value``) that counts trips, e.g. the run's metrics counter."""
        self.timeout_ticks = max(1, int(round(timeout_s / period_s)))
        self.last_valid_tick = -1
        self.tripped = True          # no controller has spoken yet: stimulation stays at zero
        self.just_tripped = False    # this update was the transition to tripped
        self._trips = trips if trips is not None else _LocalCount()

    @property
    def trips(self) -> int:
        return int(self._trips.value)

    def feed(self, tick: int) -> None:
        self.last_valid_tick = tick

    def update(self, tick: int) -> bool:
        """True while stimulation must be zero. Counts a trip on each transition to tripped."""
        expired = self.last_valid_tick < 0 or tick - self.last_valid_tick >= self.timeout_ticks
        self.just_tripped = expired and not self.tripped
        if self.just_tripped and self.last_valid_tick >= 0:
            self._trips.inc()
        self.tripped = expired
        return expired


class _AlarmAction:
    """The action of an alarm evaluated on every sensor frame (GH monitor, ROM alarm).

    A frame's value is known only after its plant step, so :meth:`_classify` takes the new frame
    (alarm flag, counter, ``stop`` at once), and :meth:`zero_now` decides before the next step whether
    stimulation must be zero: while the last frame was in alarm and for ``hold_ticks`` frames after it,
    so that ``zero`` does not switch full stimulation back on for single ticks while the joint hovers at
    the limit (on a patient: a train of jerks).
    """

    def __init__(self, kind: str, action: str, hold_ticks: int, alarm_ticks=None) -> None:
        if action not in GH_ACTIONS:
            raise ValueError(f"{kind} action must be one of {GH_ACTIONS}, not {action!r}")
        self.action = action
        self.hold_ticks = hold_ticks
        self.alarm = False
        self._alarm_ticks = alarm_ticks if alarm_ticks is not None else _LocalCount()
        self._hold_left = 0

    @property
    def alarm_ticks(self) -> int:
        return int(self._alarm_ticks.value)

    def _prime(self, alarm: bool) -> None:
        self.alarm = alarm
        self._hold_left = self.hold_ticks if alarm else 0

    def zero_now(self) -> bool:
        """Stimulation must be zero in the coming tick (actions ``zero`` and ``stop``)."""
        return self.action != "monitor" and (self.alarm or self._hold_left > 0)

    def _classify(self, alarm: bool) -> bool:
        self.alarm = alarm
        if alarm:
            self._alarm_ticks.inc()
            self._hold_left = self.hold_ticks
        elif self._hold_left:
            self._hold_left -= 1
        return alarm and self.action == "stop"


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
        self._prime(not (gh_stability <= self.threshold))

    def observe(self, gh_stability: float) -> bool:
        """Classify a new frame; True: end the run (action ``stop``)."""
        return self._classify(not (gh_stability <= self.threshold))

    def describe(self, gh_stability: float) -> str:
        """Why a frame is unstable, for the operator (after a stop; not for the tick)."""
        return f"GH stability {gh_stability:+.3f} above the threshold {self.threshold:+.3f}"


@njit(cache=True, nogil=True)
def outside_range(q, lo, hi) -> bool:
    """Any q_i < lo_i or q_i > hi_i (one compiled call per tick instead of four numpy calls)."""
    for i in range(q.shape[0]):
        if q[i] < lo[i] or q[i] > hi[i]:
            return True
    return False


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
        return self.classify(outside_range(q, self.lo, self.hi))

    def classify(self, outside: bool) -> bool:
        """Classify a new frame whose posture is ``outside`` the range (:func:`outside_range`)."""
        return self._classify(outside)

    def describe(self, q: np.ndarray, dof_names) -> str:
        """Which joints are out of range and by how much, in degrees (after a stop; not for the tick)."""
        out = [f"{n} {np.degrees(v):.2f} deg (range {np.degrees(lo + self.margin_rad):.1f}..."
               f"{np.degrees(hi - self.margin_rad):.1f} deg, margin {np.degrees(self.margin_rad):.1f} deg)"
               for n, v, lo, hi in zip(dof_names, q, self.lo, self.hi) if v < lo or v > hi]
        return "; ".join(out) if out else "no joint out of range"
