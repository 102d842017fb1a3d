"""``hil bench accuracy``: joint-angle error of the fixed-step plant against a stiff variable-step reference.

The fidelity test: all excitations ramp 0 -> 1 over the duration from the published equilibrium; the
reference is scipy's Radau on the same implicit equations with exact Jacobians. The plant run and the
reference are separate functions so that the command line can show a status while the slow reference runs.
"""
from __future__ import annotations

import numpy as np

from sim.das3.plant import Plant
from sim.das3.reference import simulate_reference


def _ramp(model, duration_s: float):
    """Every muscle's excitation at time t: t / duration, held at 1 after it."""
    def ramp(t: float) -> np.ndarray:
        return np.full(model.n_muscles, min(1.0, t / duration_s))
    return ramp


def _n_steps(step_s: float, duration_s: float) -> int:
    return int(round(duration_s / step_s))


def plant_angles(model, step_s: float, duration_s: float, scheme: str) -> np.ndarray:
    """Joint angles (rad) of the fixed-step plant at every step of the ramp, the initial state included."""
    ramp = _ramp(model, duration_s)
    n = _n_steps(step_s, duration_s)
    plant = Plant(model, step_s=step_s, scheme=scheme)
    q_plant = np.empty((n + 1, model.n_dof))
    q_plant[0] = plant.outputs.q
    for k in range(1, n + 1):
        plant.step(ramp(k * step_s))
        q_plant[k] = plant.outputs.q
    return q_plant


def reference_angles(model, step_s: float, duration_s: float, rtol: float) -> tuple[np.ndarray, dict]:
    """Joint angles (rad) of the Radau reference at the plant's step times, and the solver's statistics."""
    t_eval = np.arange(_n_steps(step_s, duration_s) + 1) * step_s
    _, x_ref, info = simulate_reference(model, model.equilibrium_state, _ramp(model, duration_s), t_eval,
                                        rtol=rtol, atol=rtol / 10)
    return x_ref[:, : model.n_dof], info


def accuracy_result(model, step_s: float, duration_s: float, scheme: str, rtol: float, q_plant: np.ndarray,
                    q_reference: np.ndarray, info: dict, reference_wall_s: float) -> dict:
    """RMS and maximum error (deg), over all joints and per joint, with the reference's statistics."""
    err_deg = np.degrees(q_plant - q_reference)
    return {
        "step_s": step_s, "duration_s": duration_s, "scheme": scheme,
        "reference": {"method": "Radau", "rtol": rtol, **info, "wall_s": reference_wall_s},
        "rms_deg": float(np.sqrt(np.mean(err_deg ** 2))),
        "max_abs_deg": float(np.abs(err_deg).max()),
        "rms_deg_per_dof": dict(zip(model.dof_names, np.sqrt(np.mean(err_deg ** 2, axis=0)).tolist())),
    }
