"""Safety functions of the loop, as on a patient: controller watchdog, GH stability monitor, ROM alarms.

All decisions are made on tick indices and plant outputs only (never on wall-clock time), so a replay
of the recorded inputs reproduces them exactly.

- Watchdog: no valid command or heartbeat from any controller for ``timeout_ticks`` ticks -> all
  stimulation forced to zero (counted once per trip); it recovers on the next valid command.
- GH monitor (paper eq. 9 stability value, every tick): action ``monitor`` (count, report), ``zero``
  (stimulation to zero while unstable) or ``stop`` (end the run, non-zero exit status).
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
    """Applies the configured action to the GH stability value of the last plant step."""

    def __init__(self, action: str, threshold: float = 0.0) -> None:
        if action not in GH_ACTIONS:
            raise ValueError(f"GH action must be one of {GH_ACTIONS}, not {action!r}")
        self.action = action
        self.threshold = threshold
        self.unstable_ticks = 0
        self.unstable = False

    def update(self, gh_stability: float) -> tuple[bool, bool]:
        """(zero stimulation, stop the run) for this stability value."""
        self.unstable = not (gh_stability <= self.threshold)  # NaN counts as unstable
        if self.unstable:
            self.unstable_ticks += 1
        return (self.unstable and self.action == "zero", self.unstable and self.action == "stop")


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

    def update(self, q: np.ndarray) -> tuple[bool, bool]:
        self.alarm = _outside(q, self.lo, self.hi)
        if self.alarm:
            self.alarm_ticks += 1
        return (self.alarm and self.action == "zero", self.alarm and self.action == "stop")
