"""The elbow's passive range under a standard moment: how a contracture is measured in the clinic.

Diong et al. (2012, Spinal Cord 50:579-584) count an elbow contracture as a loss of at least 10 deg of passive
range at a standard torque. Here the unstimulated arm starts at its rest state, a constant external elbow moment
M (N m, positive flexing; the DAS3 arm's ``M_elbow`` load, Chadwick et al. 2014 eq. 10) is held for a time, and the
elbow angle at its end is where the passive structures, gravity and any stretch reflex balance M. Three holds:
-M (the extension end), 0 (the rest angle) and +M (the flexion end). Any plant with the arm interface
(:class:`sim.das3.plant.ArmPlant`: the DAS3 arm or the reduced MTG arm) takes them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.das3.layout import DOF_NAMES

ELBOW = DOF_NAMES.index("ELx")
"""The elbow in the DAS3 DOF order, which both plants' outputs use."""
STANDARD_MOMENT_NM = 1.0
"""Default standard moment (*proposal*: the source gives no value for the elbow; at 1 N m the able-bodied DAS3
elbow opens to about 15 deg, where a contracture's loss shows)."""
MOMENT_RANGE_NM = (0.01, 20.0)
"""Moments the analysis takes (*proposal*: from barely moving the elbow to beyond what a clinician applies)."""
HOLD_S = 6.0
"""Default time each moment is held (the unstimulated elbow of either arm settles within it; the result says
when it has not, :meth:`PassiveRange.unsettled`)."""
HOLD_RANGE_S = (0.1, 30.0)
SETTLED_RAD = math.radians(0.1)
"""A hold has settled when the elbow moved less than this over its last :data:`SETTLED_WINDOW_S`."""
SETTLED_WINDOW_S = 0.1


@dataclass(frozen=True)
class PassiveRange:
    """Elbow flexion (rad) at the end of each hold, and each hold's elbow angle per plant step."""

    extension_rad: float
    rest_rad: float
    flexion_rad: float
    traces: dict          # moment (N m) -> (n,) elbow flexion, rad
    step_s: float

    @property
    def range_rad(self) -> float:
        return self.flexion_rad - self.extension_rad

    def unsettled(self) -> list[float]:
        """The moments (N m) whose hold had not settled at its end (:data:`SETTLED_RAD`)."""
        window = max(1, int(round(SETTLED_WINDOW_S / self.step_s)))
        return [m for m, trace in self.traces.items()
                if trace.size > window and abs(trace[-1] - trace[-1 - window]) >= SETTLED_RAD]


def elbow_under_moment(plant, moment_nm: float, seconds: float) -> np.ndarray:
    """The elbow flexion (rad) after each step of ``plant``, unstimulated, under a constant elbow moment."""
    plant.set_loads(moments=(0.0, 0.0, 0.0, moment_nm, 0.0))
    steps = int(round(seconds / plant.step_s))
    u = np.zeros(plant.excitation.shape[0])
    elbow = np.zeros(steps)
    for k in range(steps):
        plant.step(u)
        elbow[k] = plant.outputs.q[ELBOW]
    return elbow


def passive_range(make_plant, moment_nm: float = STANDARD_MOMENT_NM, seconds: float = HOLD_S) -> PassiveRange:
    """The three holds of the module docstring, each on a new plant from ``make_plant()`` (at its rest state)."""
    check_hold(moment_nm, seconds)
    traces = {}
    for m in (-moment_nm, 0.0, moment_nm):
        plant = make_plant()
        traces[m] = elbow_under_moment(plant, m, seconds)
    ends = [float(traces[m][-1]) for m in (-moment_nm, 0.0, moment_nm)]
    return PassiveRange(*ends, traces=traces, step_s=plant.step_s)


def check_hold(moment_nm: float, seconds: float) -> None:
    """ValueError naming the bound when the moment or the hold time is out of :data:`MOMENT_RANGE_NM`,
    :data:`HOLD_RANGE_S` (or NaN)."""
    for name, value, (lo, hi), unit in (("moment", moment_nm, MOMENT_RANGE_NM, "N m"),
                                        ("hold", seconds, HOLD_RANGE_S, "s")):
        if not lo <= value <= hi:          # (False for NaN)
            raise ValueError(f"the {name} must be in [{lo:g}, {hi:g}] {unit}, not {value!r}")

