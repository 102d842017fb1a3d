"""What a controller paper reports about one run, from its tick records (a recording's ``ticks`` stream or an
offline run's): tracking of a target posture, GH stability, safety, and the charge the stimulator delivered.

- Tracking of a DOF's target angle: RMS error over the run; settling time, the first time after which the
  error stays within ``band`` to the end (None if it never does); overshoot, the largest excursion past the
  target in the direction of the approach from the first frame (0 if none).
- GH: ticks with the unstable status bit, and the smallest stability margin, -max(stability) (eq. 9:
  stability < 0 inside the glenoid rim, so a margin > 0 is inside); None for a plant without a GH model.
- Charge per channel (uC): the sum over ticks of amplitude (mA) x pulse width (us) x frequency (Hz) x pulses
  per burst (mode + 1) x period (s) / 1000, i.e. of the applied (post-safety) stimulation.
"""
from __future__ import annotations

import math

import numpy as np

from drivers.core.contract import STATUS_GH_UNSTABLE, STATUS_WATCHDOG

SETTLING_BAND_RAD = math.radians(2.0)
"""Default settling band: a 2 deg error, the order of surface-FES elbow control results; a parameter."""


def tracking(angle: np.ndarray, target: float, period_s: float, band: float = SETTLING_BAND_RAD) -> dict:
    """RMS error, settling time (s) and overshoot (rad) of ``angle`` (rad, one per tick, frame k at (k+1) T)
    against ``target`` (rad)."""
    error = angle - target
    outside = np.flatnonzero(np.abs(error) > band)
    if outside.size == 0:
        settling = 0.0
    elif outside[-1] == error.size - 1:
        settling = None
    else:
        settling = (outside[-1] + 2) * period_s      # the frame after the last one outside, at its time
    approach = np.sign(target - angle[0]) if angle.size else 0.0
    overshoot = float(max(0.0, np.max(approach * error))) if approach != 0.0 else 0.0
    return {"rms_error_rad": float(np.sqrt(np.mean(error ** 2))), "settling_time_s": settling,
            "overshoot_rad": overshoot, "final_error_rad": float(error[-1])}


def delivered_charge_uc(applied: np.ndarray, period_s: float) -> np.ndarray:
    """(n_channels,) total charge per channel, uC, of the applied stimulation (ticks, channels, [pw, amp, f, mode])."""
    pw, amp, freq, mode = (applied[:, :, k] for k in range(4))
    return np.sum(amp * pw * freq * (mode + 1.0), axis=0) * period_s / 1000.0


def run_metrics(ticks: np.ndarray, period_s: float, channel_names, target: tuple[int, float] | None = None,
                band: float = SETTLING_BAND_RAD) -> dict:
    """The metrics of a run's tick records; ``target`` = (DOF index in the frame's q, angle rad)."""
    frame = ticks["frame"]
    status = frame["status"]
    stability = frame["gh_stability"]
    gh_modelled = not np.all(np.isnan(stability))
    out = {
        "ticks": int(len(ticks)),
        "gh_unstable_ticks": int(np.count_nonzero(status & STATUS_GH_UNSTABLE)),
        "gh_min_margin": float(-np.nanmax(stability)) if gh_modelled else None,
        "watchdog_ticks": int(np.count_nonzero(status & STATUS_WATCHDOG)),
        "charge_uc": {name: float(q) for name, q in zip(channel_names,
                                                        delivered_charge_uc(ticks["applied"], period_s))},
    }
    if target is not None:
        out["tracking"] = tracking(frame["q"][:, target[0]], target[1], period_s, band)
    return out


def config_target(cfg, dof_names) -> tuple[int, float] | None:
    """The target posture a config's loopback controller holds: its ``target_deg`` on the elbow (ELx), the
    convention of the elbow controllers; None when no driver table has one."""
    for table in cfg.drivers:
        if table.get("type") == "loopback" and isinstance(table.get("target_deg"), (int, float)):
            return dof_names.index("ELx"), math.radians(float(table["target_deg"]))
    return None
