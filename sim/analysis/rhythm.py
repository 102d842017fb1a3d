"""Published shoulder rhythms: the DAS3 girdle angles (SCy, SCz, SCx, ACy, ACz, ACx) as a function of the
thoracohumeral plane of elevation and elevation.

de Groot & Brand (2001, Clin Biomech 16:735-743) regress the clavicle's and scapula's orientation with
respect to the THORAX (YZX angles) on the humerus's (``sim/data/shoulder_rhythm_degroot2001.json``):

    angle = c0 + c_plane Hy + c_elev Hz + c_rest angle_rest          (deg).

DAS3 chains its girdle (the release's joints ``sc1..ac3``): R_clavicle = Ry(SCy) Rz(SCz) Rx(SCx) and
R_scapula = R_clavicle Ry(ACy) Rz(ACz) Rx(ACx), frames as in the Delft model the regression uses (the DAS3
authors feed its angles to these DOFs). So SC = the clavicle's YZX angles and AC = YZX(R_clavicle^T
R_scapula), exactly. The regression leaves the clavicle's axial rotation open; it is chosen to keep the AC
joint as close as possible to its rest relation R_clav,rest^T R_scap,rest (van der Helm 1994, "Model
inputs": axial rotation "obtained by minimizing rotations in the AC joint", Pronk 1991):
max over SCx of trace(R_ac(SCx)^T R_ac,rest), in closed form.

A regression from other shoulders does not fit the DAS3 closed chain: held as published, the scapula lifts
off the thorax ellipsoid or sinks into it and the conoid ligament stretches (kN forces no muscle can
balance). van der Helm (1994, "Model inputs") met the same: his measured orientations were imposed through
landmark coordinates, "the resulting scapular position was slightly changed from the mean orientation, due to
the imposed motion constraints of the thorax in the model". :func:`fit_to_model` does the same for DAS3:
the girdle closest to the rhythm (clavicle and scapula orientations, least squares) whose TS and AI
contact functions E and conoid length equal those of the model's published rest posture
(``das3_equilibrium.json``), i.e. the scapula rests on the thorax and the conoid holds as it does at rest.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources

import numpy as np
from scipy.optimize import minimize

from sim.analysis.rest_model import shortest_valid_path
from sim.das3.kernels.step import IA, IQ, IQD, evaluate, new_plant_work
from sim.das3.kinematics import frames
from sim.das3.model import CLAVICLE_FRAME, N_LOADS, N_STATES, SCAPULA_FRAME, Das3Model

DATA_FILE = "shoulder_rhythm_degroot2001.json"
RHYTHMS = ("degroot2001", "degroot2001-das3rest")
"""``degroot2001``: with the rest orientation of the Delft model the DAS3 authors use with it;
``degroot2001-das3rest``: with the DAS3 model's own published rest posture (``das3_equilibrium.json``)."""


def rot_x(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def rot_y(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def rot_z(a: float) -> np.ndarray:
    c, s = math.cos(a), math.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def yzx_matrix(angles) -> np.ndarray:
    """R = Ry(a0) Rz(a1) Rx(a2)."""
    return rot_y(angles[0]) @ rot_z(angles[1]) @ rot_x(angles[2])


def yzx_angles(R: np.ndarray) -> np.ndarray:
    """Inverse of :func:`yzx_matrix` with the middle angle in [-pi/2, pi/2]: R[1,0] = sin z,
    R[1,1] = cos z cos x, R[1,2] = -cos z sin x, R[0,0] = cos y cos z, R[2,0] = -sin y cos z."""
    z = math.asin(max(-1.0, min(1.0, R[1, 0])))
    return np.array([math.atan2(-R[2, 0], R[0, 0]), z, math.atan2(-R[1, 2], R[1, 1])])


def girdle_from_thorax(clavicle_yzx, scapula_yzx) -> np.ndarray:
    """DAS3 girdle angles (rad) from the clavicle's and scapula's YZX angles w.r.t. the thorax (rad)."""
    Rc = yzx_matrix(clavicle_yzx)
    return np.concatenate([np.asarray(clavicle_yzx, float), yzx_angles(Rc.T @ yzx_matrix(scapula_yzx))])


def thorax_from_girdle(girdle) -> tuple[np.ndarray, np.ndarray]:
    """(clavicle YZX, scapula YZX) w.r.t. the thorax (rad) from the six DAS3 girdle angles (rad)."""
    Rc = yzx_matrix(girdle[:3])
    return np.asarray(girdle[:3], float), yzx_angles(Rc @ yzx_matrix(girdle[3:6]))


def least_ac_rotation(clavicle_yz, R_scapula: np.ndarray, R_ac_rest: np.ndarray) -> float:
    """Clavicle axial rotation x (rad) maximising trace(R_ac(x)^T R_ac,rest), R_ac(x) = Rx(x)^T K with
    K = Rz(z)^T Ry(y)^T R_scapula: trace(Rx(x)^T N), N = K R_ac,rest^T, = N00 + cos x (N11 + N22)
    + sin x (N21 - N12), largest at x = atan2(N21 - N12, N11 + N22)."""
    K = rot_z(clavicle_yz[1]).T @ rot_y(clavicle_yz[0]).T @ R_scapula
    N = K @ R_ac_rest.T
    return math.atan2(N[2, 1] - N[1, 2], N[1, 1] + N[2, 2])


@dataclass(frozen=True)
class Rhythm:
    """A regression (coefficients per thorax-based angle, deg) with the rest orientation it is applied to."""

    name: str
    coefficients: dict
    clavicle_rest: np.ndarray   # (3,) YZX w.r.t. thorax, rad
    scapula_rest: np.ndarray    # (3,) YZX w.r.t. thorax, rad

    def thorax_angles(self, plane: float, elevation: float) -> tuple[np.ndarray, np.ndarray]:
        """(clavicle y, z), (scapula y, z, x) w.r.t. the thorax (rad) from the regression."""
        hy, hz = math.degrees(plane), math.degrees(elevation)
        rest = {"clavicle": np.degrees(self.clavicle_rest), "scapula": np.degrees(self.scapula_rest)}

        def angle(bone: str, axis: int) -> float:
            c = self.coefficients[f"{bone}_{'yzx'[axis]}"]
            return math.radians(c["intercept"] + c["plane"] * hy + c["elevation"] * hz + c["rest"] * rest[bone][axis])

        return (np.array([angle("clavicle", 0), angle("clavicle", 1)]),
                np.array([angle("scapula", 0), angle("scapula", 1), angle("scapula", 2)]))

    def girdle(self, plane: float, elevation: float) -> np.ndarray:
        """The six DAS3 girdle angles (rad) at the thoracohumeral plane of elevation and elevation (rad)."""
        clav_yz, scap = self.thorax_angles(plane, elevation)
        R_scap = yzx_matrix(scap)
        R_ac_rest = yzx_matrix(self.clavicle_rest).T @ yzx_matrix(self.scapula_rest)
        clavicle = np.append(clav_yz, least_ac_rotation(clav_yz, R_scap, R_ac_rest))
        return girdle_from_thorax(clavicle, scap)


def load_rhythm(name: str, model: Das3Model) -> Rhythm:
    """The named rhythm (:data:`RHYTHMS`); ValueError for an unknown name."""
    if name not in RHYTHMS:
        raise ValueError(f"rhythm must be one of {', '.join(RHYTHMS)}, not {name!r}")
    doc = json.loads(resources.files("sim.data").joinpath(DATA_FILE).read_text())
    if name == "degroot2001":
        rest = doc["rests"]["dsem"]
        clav, scap = np.radians(rest["clavicle_yzx_deg"]), np.radians(rest["scapula_yzx_deg"])
    else:
        clav, scap = thorax_from_girdle(np.asarray(model.equilibrium_state[:6], float))
    return Rhythm(name, doc["coefficients"], clav, scap)


def chain_conditions(model: Das3Model, girdle) -> np.ndarray:
    """(E of TS, E of AI, conoid length in m) of the girdle (the plant's contact ellipsoid and conoid
    attachments; the humerus does not enter)."""
    q = np.array(model.equilibrium_state[:11], float)
    q[:6] = girdle
    R, P = frames(model.arrays, q)
    R, P = R[0], P[0]
    c, con = np.asarray(model.arrays.contact), np.asarray(model.arrays.conoid)
    pts = P[SCAPULA_FRAME] + np.asarray(model.arrays.contact_points) @ R[SCAPULA_FRAME].T
    e = np.sum(((pts - c[0:3]) / c[3:6]) ** 2, axis=1) - 1.0
    origin = P[CLAVICLE_FRAME] + R[CLAVICLE_FRAME] @ con[0:3]
    insertion = P[SCAPULA_FRAME] + R[SCAPULA_FRAME] @ con[3:6]
    return np.append(e, np.linalg.norm(insertion - origin))


class RhythmFitError(RuntimeError):
    """No girdle near the rhythm meets the model's closed-chain conditions."""


def fit_to_model(model: Das3Model, girdle, start=None, tol: float = 1e-9) -> np.ndarray:
    """The girdle (rad) nearest ``girdle`` (||R_clav - R_clav,target||_F^2 + ||R_scap - R_scap,target||_F^2) with
    :func:`chain_conditions` equal to those of the published rest posture (module docstring), within the
    model's girdle ranges (widened to the rest posture; beyond them the joint stops act). Paths are not
    constrained (:func:`short_paths` reports them): held near rest by them, no girdle solves. ``start``: the
    girdle to start from (e.g. the previous elevation's fit; default the rhythm's, clipped into the ranges)."""
    target = np.asarray(girdle, float)
    rest = chain_conditions(model, np.asarray(model.equilibrium_state[:6], float))
    Rc_t = yzx_matrix(target[:3])
    Rs_t = Rc_t @ yzx_matrix(target[3:6])

    def cost(g):
        Rc = yzx_matrix(g[:3])
        return float(np.sum((Rc @ yzx_matrix(g[3:6]) - Rs_t) ** 2) + np.sum((Rc - Rc_t) ** 2))

    def scaled_conditions(g):
        return (chain_conditions(model, g) - rest) / np.array([1.0, 1.0, rest[2]])

    rest_girdle = np.asarray(model.equilibrium_state[:6], float)
    ranges = np.asarray(model.dof_ranges)[:6]
    box = list(zip(np.minimum(ranges[:, 0], rest_girdle), np.maximum(ranges[:, 1], rest_girdle)))
    start = np.clip(target if start is None else np.asarray(start, float), *np.array(box).T)
    res = minimize(cost, start, method="SLSQP", bounds=box, constraints=[{"type": "eq", "fun": scaled_conditions}],
                   options={"maxiter": 200, "ftol": 1e-14})
    if not np.max(np.abs(scaled_conditions(res.x))) <= tol:
        raise RhythmFitError("no girdle near the rhythm keeps the scapula on the thorax and the conoid as at rest "
                             f"(largest condition error {np.max(np.abs(scaled_conditions(res.x))):.3g})")
    return res.x


def path_margins(model: Das3Model, girdle, gh=None) -> np.ndarray:
    """(138,) m: path length minus (tendon slack + shortest valid fibre) with the girdle given and the other
    DOFs as in the published rest posture (or ``gh``: all 11 angles)."""
    x = np.array(model.equilibrium_state, float)
    if gh is not None:
        x[IQ:IQD] = gh
    x[IQ:IQ + 6] = girdle
    W = new_plant_work(model.arrays)
    evaluate(model.arrays, x, np.zeros(N_STATES), x[IA:], np.zeros(N_LOADS), W)
    return W.mu.L - shortest_valid_path(model)


def scapula_deviation(girdle_a, girdle_b) -> float:
    """Angle (rad) of the rotation between the two girdles' scapula orientations w.r.t. the thorax."""
    Ra, Rb = (yzx_matrix(thorax_from_girdle(g)[1]) for g in (girdle_a, girdle_b))
    return math.acos(max(-1.0, min(1.0, (np.trace(Ra.T @ Rb) - 1.0) / 2.0)))


def short_paths(model: Das3Model, q) -> list[tuple[str, float]]:
    """(muscle, mm) of every path shorter than its tendon slack length plus the shortest valid fibre at the
    11 angles q (:func:`sim.analysis.rest_model.shortest_valid_path`: outside the path model), shortest first."""
    margin = path_margins(model, np.asarray(q)[:6], q)
    return [(model.muscle_names[i], float(-margin[i] * 1e3)) for i in np.argsort(margin) if margin[i] < -PATH_TOL_M]


PATH_TOL_M = 1e-6
"""A path this much shorter than the limit still counts as valid (the fit's constraints hold to ~1e-12 m)."""
