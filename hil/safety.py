"""Safety functions of the loop, as on a patient: controller watchdog, GH stability monitor, ROM alarms.

All decisions are made on tick indices and plant outputs only (never on wall-clock time), so a replay
of the recorded inputs reproduces them exactly.

- Watchdog: no valid command or heartbeat from any controller for ``timeout_ticks`` ticks -> all
  stimulation forced to zero (counted once per trip); it recovers on the next valid command.
- GH monitor (paper eq. 9 stability value of every frame): action ``monitor`` (count, report),
  ``zero`` (stimulation to zero while unstable and for ``gh_zero_hold_s`` after) or ``stop`` (end the run
  at the first unstable frame, non-zero exit status).
- Range-of-motion alarm: a joint beyond its range by more than ``rom_margin_rad``.
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


class Watchdog:
    """Tick-based controller watchdog."""

    def __init__(self, timeout_s: float, period_s: float) -> None:
        self.timeout_ticks = max(1, int(round(timeout_s / period_s)))
        self.last_valid_tick = -1
        self.tripped = True          # no controller has spoken yet: stimulation stays at zero
        self.trips = 0

    def feed(self, tick: int) -> None:
        self.last_valid_tick = tick

    def update(self, tick: int) -> bool:
        """True while stimulation must be zero. Counts a trip on each transition to tripped."""
        expired = self.last_valid_tick < 0 or tick - self.last_valid_tick >= self.timeout_ticks
        if expired and not self.tripped and self.last_valid_tick >= 0:
            self.trips += 1
        self.tripped = expired
        return expired


class GHMonitor:
    """Applies the configured action to the GH stability value (paper eq. 9) of each sensor frame.

    The value of a frame is known only after its plant step, so: :meth:`observe` classifies the new
    frame (status bit, counter, ``stop`` at once), and :meth:`zero_now` decides before the next step
    whether stimulation must be zero - while the last frame was unstable and for ``hold_ticks`` stable
    frames after it, so that ``zero`` does not switch full stimulation back on for single ticks while
    the joint hovers at the rim.
    """

    def __init__(self, action: str, threshold: float = 0.0, hold_ticks: int = 0) -> None:
        if action not in GH_ACTIONS:
            raise ValueError(f"GH action must be one of {GH_ACTIONS}, not {action!r}")
        self.action = action
        self.threshold = threshold
        self.hold_ticks = hold_ticks
        self.unstable_ticks = 0
        self.unstable = False
        self._hold_left = 0

    def prime(self, gh_stability: float) -> None:
        """The state before the first tick (not counted)."""
        self.unstable = not (gh_stability <= self.threshold)
        self._hold_left = self.hold_ticks if self.unstable else 0

    def zero_now(self) -> bool:
        """Stimulation must be zero in the coming tick (actions ``zero`` and ``stop``)."""
        return self.action != "monitor" and (self.unstable or self._hold_left > 0)

    def observe(self, gh_stability: float) -> bool:
        """Classify a new frame; True: end the run (action ``stop``)."""
        self.unstable = not (gh_stability <= self.threshold)  # NaN counts as unstable
        if self.unstable:
            self.unstable_ticks += 1
            self._hold_left = self.hold_ticks
        elif self._hold_left:
            self._hold_left -= 1
        return self.unstable and self.action == "stop"


@njit(cache=True, nogil=True)
def _outside(q, lo, hi) -> bool:
    """Any q_i < lo_i or q_i > hi_i (one compiled call per tick instead of four numpy calls)."""
    for i in range(q.shape[0]):
        if q[i] < lo[i] or q[i] > hi[i]:
            return True
    return False


class RangeOfMotion:
    """Alarm when a joint leaves its range by more than a margin."""

    def __init__(self, ranges: np.ndarray, margin_rad: float, action: str = "monitor") -> None:
        if action not in GH_ACTIONS:
            raise ValueError(f"ROM action must be one of {GH_ACTIONS}, not {action!r}")
        self.lo = np.asarray(ranges)[:, 0] - margin_rad
        self.hi = np.asarray(ranges)[:, 1] + margin_rad
        self.action = action
        self.alarm_ticks = 0
        self.alarm = False

    def warmup(self, q: np.ndarray) -> None:
        """Compile/load the range-check kernel (no state change)."""
        _outside(q, self.lo, self.hi)

    def prime(self, q: np.ndarray) -> None:
        """The posture before the first tick (not counted)."""
        self.alarm = _outside(q, self.lo, self.hi)

    def zero_now(self) -> bool:
        """Stimulation must be zero in the coming tick: the last frame was out of range (``zero``/``stop``)."""
        return self.alarm and self.action != "monitor"

    def observe(self, q: np.ndarray) -> bool:
        """Classify a new frame; True: end the run (action ``stop``)."""
        self.alarm = _outside(q, self.lo, self.hi)
        if self.alarm:
            self.alarm_ticks += 1
        return self.alarm and self.action == "stop"
