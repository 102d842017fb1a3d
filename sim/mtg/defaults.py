"""Default MTG parameters of the reduced arm derived from the full DAS3 model, so that the reduced arm is the DAS3
arm's surrogate (``hil model mtg-defaults`` writes ``sim/data/mtg_default.json``).

Sources, per column of Millard et al. (2019) Table A.2:

- tau_o^M, theta_o^A, theta_w^A: least-squares Gaussian tau_o exp(-((theta - theta_o)/theta_w)^2 / 2) (the
  shape of tA, Appendix A) through the DAS3 maximum isometric moments of the MTG's task
  (``hil analyze max-moment``, Chadwick et al. 2014 Figs. 4-8; the two plane-of-elevation tasks are this
  project's own, ``sim.fitting.das3_passive.PLANE_TASKS``), CSVs in ``sim/data/mtg_source/``.
- omega_max^M, tV(omega_max^E), tV(omega_max^C/2): Millard Table A.2, shoulder flexion/extension rows for the
  shoulder MTGs and elbow flexion/extension rows for the elbow and forearm MTGs (the table has no forearm
  rows; the forearm takes the elbow's).
- theta_0^PE, theta_1^PE: least-squares fit of tPE (``sim.mtg.curves.PassiveTorqueAngle``) to the DAS3
  passive moment of the coordinate, P = -(holding moment) - (reduced arm's gravity moment), from the
  holding-moment sweeps with every muscle inactive (``sim.fitting.das3_passive``), split by sign: a positive passive
  moment is the stretched MTG of direction +1 (Eq. (7)'s split applied to passive torque).
- beta^PE: :data:`BETA_PE` (the paper gives no value).
- activation time constants: the Fmax-weighted means of the DAS3 elements that cross the coordinate's joint
  (the GH joint for the shoulder coordinates), from the DAS3 activation constants (Chadwick et al. 2014 eq. 1).
"""
from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np

from sim.das3.model import LOAD_NAMES, MUS_C1, MUS_C2, MUS_FMAX, Das3Model
from sim.fitting.das3_passive import sweep_base
from sim.mtg.curves import PassiveTorqueAngle
from sim.mtg.model import COORDINATES, FORMAT, MtgModel, parse_mtg_parameters

BETA_PE = 0.1
"""beta^PE of Eq. (3), this project's choice: the paper uses a damping term but prints no value."""
PASSIVE_FLOOR_NM = 0.5
"""A sweep's passive moment below this (N m) counts as none when fitting tPE (numerical noise of the solves)."""
NO_PASSIVE_SPAN_RAD = math.radians(45.0)
"""Where a sweep shows no passive moment on one side, tPE starts at the sweep's end and reaches tau_o this far
beyond it: the order of theta_1^PE - theta_0^PE of Millard Table A.2's shoulder and elbow rows (30-45 deg)."""


@dataclass(frozen=True)
class MtgSource:
    """Where one MTG's defaults come from."""

    name: str
    coordinate: str
    direction: int
    task: str                 # max-moment CSV: sim/data/mtg_source/max_moment_<task>.csv
    velocity_row: str         # Millard Table A.2 row


MTG_SOURCES = (
    MtgSource("horizontal_flexor", "plane_of_elevation", 1, "horizontal-flexion", "Shoulder Flex."),
    MtgSource("horizontal_extensor", "plane_of_elevation", -1, "horizontal-extension", "Shoulder Ext."),
    MtgSource("elevator", "elevation", 1, "abduction", "Shoulder Flex."),
    MtgSource("depressor", "elevation", -1, "adduction", "Shoulder Ext."),
    MtgSource("internal_rotator", "axial_rotation", 1, "internal-rotation", "Shoulder Flex."),
    MtgSource("external_rotator", "axial_rotation", -1, "external-rotation", "Shoulder Ext."),
    MtgSource("elbow_flexor", "elbow_flexion", 1, "elbow-flexion", "Elbow Flex."),
    MtgSource("elbow_extensor", "elbow_flexion", -1, "elbow-extension", "Elbow Ext."),
    MtgSource("pronator", "pronation", 1, "pronation", "Elbow Flex."),
    MtgSource("supinator", "pronation", -1, "supination", "Elbow Ext."),
)
"""Elevation: the scapular-plane tasks (Chadwick Fig. 5), the plane in the middle of the working range."""

TABLE_A2_VELOCITY = {
    "Shoulder Ext.": (931.0, 1.10, 0.25),
    "Shoulder Flex.": (1093.0, 1.23, 0.25),
    "Elbow Ext.": (1037.0, 1.37, 0.19),
    "Elbow Flex.": (1057.0, 1.32, 0.19),
}
"""Millard et al. (2019) Table A.2: omega_max^M (deg/s), tV(omega_max^E), tV(omega_max^C/2)."""


def read_source_csv(name: str) -> list[dict]:
    """Rows of ``sim/data/mtg_source/<name>`` (checked rows only)."""
    path = resources.files("sim.data").joinpath("mtg_source", name)
    with path.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return [r for r in rows if r.get("checks_passed", "True") == "True"]


def fit_gaussian(angles_rad: np.ndarray, moments: np.ndarray) -> tuple[float, float, float]:
    """(tau_o, theta_o, theta_w) of the least-squares Gaussian through the maximum moments; theta_o is kept within
    one sweep length of the swept range and theta_w within [10 deg, 4 sweep lengths]."""
    from scipy.optimize import least_squares  # imported where it is used: scipy.optimize is slow to import
    lo, hi = float(angles_rad.min()), float(angles_rad.max())
    span = hi - lo
    peak = int(np.argmax(moments))

    def residual(p):
        return p[0] * np.exp(-0.5 * ((angles_rad - p[1]) / p[2]) ** 2) - moments

    sol = least_squares(residual, [moments[peak], angles_rad[peak], span],
                        bounds=([0.0, lo - span, math.radians(10.0)], [np.inf, hi + span, 4.0 * span]))
    return float(sol.x[0]), float(sol.x[1]), float(sol.x[2])


def fit_passive(angles_rad: np.ndarray, passive_nm: np.ndarray, tau_max: float, direction: int
                ) -> tuple[float, float]:
    """(theta_0^PE, theta_1^PE) of the MTG of ``direction`` from the passive moment samples: tPE(theta) tau_o
    against max(u P, 0), least squares over both angles (theta_1 beyond theta_0 against u)."""
    from scipy.optimize import least_squares  # imported where it is used: scipy.optimize is slow to import
    target = np.maximum(direction * passive_nm, 0.0)
    target[target < PASSIVE_FLOOR_NM] = 0.0
    order = np.argsort(angles_rad)
    th, tg = angles_rad[order], target[order]
    if not np.any(tg > 0.0):
        end = th[0] if direction > 0 else th[-1]
        return float(end), float(end - direction * NO_PASSIVE_SPAN_RAD)
    loaded = th[tg > 0.0]
    start0 = (loaded.max() if direction > 0 else loaded.min())

    def residual(p):
        t0, span = p
        curve = PassiveTorqueAngle(t0, t0 - direction * span).curve()
        return np.array([curve(x)[0] for x in th]) * tau_max - tg

    sol = least_squares(residual, [start0, math.radians(45.0)], bounds=([th[0] - 1.0, math.radians(2.0)],
                                                                          [th[-1] + 1.0, math.radians(360.0)]))
    t0, span = sol.x
    return float(t0), float(t0 - direction * span)


def activation_constants(das3: Das3Model, coordinate: str) -> tuple[float, float]:
    """(tact, tdeact) s: Fmax-weighted means over the DAS3 elements crossing the coordinate's joint."""
    mus = das3.arrays.mus
    if coordinate in ("plane_of_elevation", "elevation", "axial_rotation"):
        crossing = np.asarray(das3.crosses_gh, dtype=bool)
    else:
        dof = das3.dof_names.index("ELx" if coordinate == "elbow_flexion" else "PSy")
        crossing = np.array([dof in d for d in das3.muscle_dof_indices])
    w = mus[crossing, MUS_FMAX]
    tdeact = 1.0 / mus[crossing, MUS_C2]
    tact = 1.0 / (mus[crossing, MUS_C1] + mus[crossing, MUS_C2])
    return float(w @ tact / w.sum()), float(w @ tdeact / w.sum())


def passive_moments(das3: Das3Model, coordinate: str, gravity_model) -> tuple[np.ndarray, np.ndarray]:
    """(angles, passive moment about the coordinate) of ``passive_<coordinate>.csv``: P = -L - G, L the holding
    moments and G the reduced arm's gravity, both in the load basis (the shoulder moments about e_y, z', y_h;
    ``gravity_model``: an MtgModel without passive torque). Rows without a checked state are left out."""
    base = sweep_base(das3, coordinate)
    c = COORDINATES.index(coordinate)
    angles, values = [], []
    for r in read_source_csv(f"passive_{coordinate}.csv"):
        q = np.array([base.plane_of_elevation, base.elevation, base.axial_rotation, base.elbow_flexion,
                      base.pronation])
        q[:3] = np.radians([float(r["plane_deg"]), float(r["elevation_deg"]), float(r["axial_rotation_deg"])])
        q[c] = math.radians(float(r["angle_deg"]))
        loads = np.array([float(r[f"{n}_Nm"]) for n in LOAD_NAMES[:5]])
        gravity = gravity_model.generalized_forces(q)
        if c < 3:
            axes = gravity_model.shoulder_axes(q)
            gravity = np.concatenate([np.linalg.solve(axes.T @ axes, gravity[:3]), gravity[3:]])
        values.append(-loads[c] - gravity[c])
        angles.append(q[c])
    return np.array(angles), np.array(values)


def _entry(das3: Das3Model, src: MtgSource) -> dict:
    rows = read_source_csv(f"max_moment_{src.task}.csv")
    angles = np.radians([float(r["angle_deg"]) for r in rows])
    tau, theta_o, width = fit_gaussian(angles, np.array([float(r["moment_Nm"]) for r in rows]))
    omega, tv_e, tv_c = TABLE_A2_VELOCITY[src.velocity_row]
    tact, tdeact = activation_constants(das3, src.coordinate)
    return {"name": src.name, "coordinate": src.coordinate, "direction": src.direction, "tau_max_nm": tau,
            "theta_opt_deg": math.degrees(theta_o), "theta_width_deg": math.degrees(width),
            "omega_max_deg_s": omega, "tv_eccentric": tv_e, "tv_half_concentric": tv_c,
            "beta": BETA_PE, "tact_s": tact, "tdeact_s": tdeact,
            "source": f"active: max_moment_{src.task}.csv; velocity: Millard 2019 Table A.2 '{src.velocity_row}'; "
                      f"passive: passive_{src.coordinate}.csv"}


def derive_defaults(das3: Das3Model) -> dict:
    """The default parameter file's JSON object from the source CSVs and the DAS3 model."""
    entries = [_entry(das3, s) for s in MTG_SOURCES]
    for e in entries:      # provisional passive curves, switched off (lambda_p = 1), for the gravity model
        e["theta_pe0_deg"], e["theta_pe1_deg"] = (0.0, -1.0) if e["direction"] > 0 else (0.0, 1.0)
        e["fit"] = {"lambda_p": 1.0}
    gravity_model = MtgModel(das3, parse_mtg_parameters({"format": FORMAT, "mtgs": entries}))
    for coord in COORDINATES:
        angles, passive = passive_moments(das3, coord, gravity_model)
        for e in entries:
            if e["coordinate"] == coord:
                t0, t1 = fit_passive(angles, passive, e["tau_max_nm"], e["direction"])
                e["theta_pe0_deg"], e["theta_pe1_deg"] = math.degrees(t0), math.degrees(t1)
                del e["fit"]
    return {"format": FORMAT, "description": "Default MTG arm: the DAS3 arm's surrogate (sim/mtg/defaults.py)",
            "mtgs": entries}
