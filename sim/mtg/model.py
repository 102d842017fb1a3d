"""The reduced muscle-torque-generator (MTG) arm's model: its MTG parameter file and the constants the kernels
(:mod:`sim.mtg.arm`) read, derived from the DAS3 model (segment inertias, elbow and forearm joints, and the
frozen clavicle and scapula of the published equilibrium).

Parameter file (JSON, ``sim/data/mtg_default.json`` by default; ``hil fit mtg`` writes fitted ones): one entry
per MTG with its coordinate, direction (+1: the MTG's torque increases the coordinate) and the columns of
Millard et al. (2019) Table A.2 (tau_o^M, theta_o^A, theta_w^A, omega_max^M, tV(omega_max^E),
tV(omega_max^C/2), theta_0^PE, theta_1^PE), beta^PE, the activation time constants and the fitting parameters
p of Eq. (3). Angles in degrees at this edge, radians inside.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from sim.das3.kernels.multibody import multibody_eval, new_multibody_work
from sim.das3.model import HUMERUS_FRAME, LOAD_NAMES, SCAPULA_FRAME, Das3Model, load_model
from sim.errors import UserInputError
from sim.input_file import InputFileError, read_input_file
from sim.jit.kernel import writable
from sim.mtg.arm import MtgArrays, bias_and_mass, generalized_forces, kinematics, new_mtg_work
from sim.mtg.contracture import ContractureTable, contracture_table, no_contracture
from sim.mtg.curve_table import stack_tables, tabulate
from sim.mtg.curves import ActiveTorqueAngle, FitParameters, MtgCurves, PassiveTorqueAngle, TorqueVelocity
from sim.mtg.patient import ActuatorPatient, ActuatorReflex, able_bodied, no_reflex, patient_actuators
from sim.mtg.step import MTG_STEP_OK, mtg_steps

COORDINATES = ("plane_of_elevation", "elevation", "axial_rotation", "elbow_flexion", "pronation")
"""The reduced arm's generalized coordinates: thoracohumeral YZY angles, DAS3 ELx and PSy."""
ELEVATION_STOPS_RAD = (math.radians(10.0), math.radians(150.0))
"""Range of the elevation, beyond which a stop holds the arm: the range of the DAS3 data the MTG curves come
from (``sim/data/mtg_source``: maximum and passive moments from 10 to 150 deg); it keeps the YZY coordinates off
their singularity at 0 deg, where plane and axial rotation are undefined. This project's choice."""
ELEVATION_STOP_K2 = 50000.0
"""K2 of the elevation stops, N m/rad^2: ten times the DAS3 joint-range constant (spec "Passive joint moments"),
so that the strongest default MTG at full activation (the depressor, about 170 N m) presses the arm only about
3.4 deg past the stop. This project's choice."""
FORMAT = "fes-hil mtg parameters"
DEFAULT_FILE = "mtg_default.json"
FIT_KEYS = ("s_a", "s_v", "delta_p_deg", "lambda_p", "s_tau")
CURVE_KEYS = ("tau_max_nm", "theta_opt_deg", "theta_width_deg", "omega_max_deg_s", "tv_eccentric",
              "tv_half_concentric", "theta_pe0_deg", "theta_pe1_deg", "beta", "tact_s", "tdeact_s")


class MtgParameterError(UserInputError, ValueError):
    """An MTG parameter file that cannot be used; the message names the file, the MTG and the key."""


@dataclass(frozen=True, eq=False)
class MtgSpec:
    """One MTG: name, coordinate index, direction u, its curves and fitting parameters, activation constants."""

    name: str
    coordinate: int
    direction: int
    curves: MtgCurves
    fit: FitParameters
    tact: float
    tdeact: float
    source: str = ""


@dataclass(frozen=True, eq=False)
class MtgParameters:
    mtgs: tuple[MtgSpec, ...]
    description: str = ""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.mtgs)

    def index(self, name: str) -> int:
        return self.names.index(name)

    @property
    def canonical_json(self) -> str:
        """The parameters as sorted, compact JSON: what the model identity (``data_sha256``) hashes."""
        return json.dumps(parameters_json(self), sort_keys=True, separators=(",", ":"))

    @functools.cached_property
    def curve_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every MTG's tA, tV and tPE as tables (:func:`sim.mtg.curve_table.stack_tables`), built once per parameter
        set: a patient's arm is built on the plain arm's parameters, whose curves no patient changes."""
        return stack_tables([[tabulate(c.xs, c.ys) for c in (s.curves.a_curve, s.curves.v_curve, s.curves.p_curve)]
                             for s in self.mtgs])


def _number(entry: dict, key: str, where: str) -> float:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MtgParameterError(f"{where}: key {key!r} must be a finite number, got {value!r}")
    return float(value)


def _spec(entry: dict, where: str) -> MtgSpec:
    if not isinstance(entry, dict):
        raise MtgParameterError(f"{where}: each MTG must be a table")
    name = entry.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise MtgParameterError(f"{where}: 'name' must be an identifier, got {name!r}")
    where = f"{where} ({name})"
    coord = entry.get("coordinate")
    if coord not in COORDINATES:
        raise MtgParameterError(f"{where}: 'coordinate' must be one of {', '.join(COORDINATES)}, got {coord!r}")
    direction = entry.get("direction")
    if direction not in (1, -1) or isinstance(direction, bool):
        raise MtgParameterError(f"{where}: 'direction' must be 1 or -1, got {direction!r}")
    v = {k: _number(entry, k, where) for k in CURVE_KEYS}
    fit_table = entry.get("fit", {})
    if not isinstance(fit_table, dict) or set(fit_table) - set(FIT_KEYS):
        raise MtgParameterError(f"{where}: 'fit' takes only {', '.join(FIT_KEYS)}")
    defaults = {"s_a": 1.0, "s_v": 1.0, "delta_p_deg": 0.0, "lambda_p": 0.0, "s_tau": 1.0}
    f = {k: _number({**defaults, **fit_table}, k, f"{where}, fit") for k in FIT_KEYS}
    try:
        curves = MtgCurves(v["tau_max_nm"], ActiveTorqueAngle(math.radians(v["theta_opt_deg"]),
                                                              math.radians(v["theta_width_deg"])),
                           TorqueVelocity(math.radians(v["omega_max_deg_s"]), v["tv_eccentric"],
                                          v["tv_half_concentric"]),
                           PassiveTorqueAngle(math.radians(v["theta_pe0_deg"]), math.radians(v["theta_pe1_deg"])),
                           v["beta"])
        fit = FitParameters(f["s_a"], f["s_v"], math.radians(f["delta_p_deg"]), f["lambda_p"], f["s_tau"])
    except ValueError as exc:
        raise MtgParameterError(f"{where}: {exc}") from None
    rises_against = -1 if v["theta_pe1_deg"] > v["theta_pe0_deg"] else 1
    if rises_against != direction:
        raise MtgParameterError(f"{where}: the passive curve must rise against the MTG's direction "
                                "(theta_pe1 < theta_pe0 for direction 1, > for -1)")
    if not (v["tact_s"] > 0.0 and v["tdeact_s"] > 0.0):
        raise MtgParameterError(f"{where}: tact_s and tdeact_s must be > 0")
    return MtgSpec(name, COORDINATES.index(coord), int(direction), curves, fit, v["tact_s"], v["tdeact_s"],
                   str(entry.get("source", "")))


def parse_mtg_parameters(data: dict, where: str = "MTG parameters") -> MtgParameters:
    """Validated parameters from the file's JSON object; every coordinate needs one MTG each way."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise MtgParameterError(f"{where}: not an MTG parameter file (needs \"format\": \"{FORMAT}\")")
    entries = data.get("mtgs")
    if not isinstance(entries, list) or not entries:
        raise MtgParameterError(f"{where}: 'mtgs' must be a non-empty list")
    specs = tuple(_spec(e, f"{where}, mtgs[{i}]") for i, e in enumerate(entries))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise MtgParameterError(f"{where}: MTG names must be unique")
    for c, coord in enumerate(COORDINATES):
        dirs = sorted(s.direction for s in specs if s.coordinate == c)
        if dirs != [-1, 1]:
            raise MtgParameterError(f"{where}: {coord} needs exactly one MTG with direction 1 and one with -1")
    return MtgParameters(specs, str(data.get("description", "")))


def load_mtg_parameters(path: str | Path | None = None) -> MtgParameters:
    """The parameter file at ``path`` (default: the shipped ``sim/data/mtg_default.json``)."""
    if path is None:
        text = resources.files("sim.data").joinpath(DEFAULT_FILE).read_text(encoding="utf-8")
        where = f"sim/data/{DEFAULT_FILE}"
    else:
        where = str(path)
        try:
            text = read_input_file(path).decode("utf-8")
        except InputFileError as exc:
            raise MtgParameterError(str(exc)) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise MtgParameterError(f"{where}: cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MtgParameterError(f"{where}: not valid JSON: {exc}") from None
    return parse_mtg_parameters(data, where)


def parameters_json(params: MtgParameters, description: str | None = None) -> dict:
    """The file's JSON object of a parameter set (the inverse of :func:`parse_mtg_parameters`)."""
    out = []
    for s in params.mtgs:
        c = s.curves
        out.append({
            "name": s.name, "coordinate": COORDINATES[s.coordinate], "direction": s.direction,
            "tau_max_nm": c.tau_max, "theta_opt_deg": math.degrees(c.active.theta_opt),
            "theta_width_deg": math.degrees(c.active.theta_width),
            "omega_max_deg_s": math.degrees(c.velocity.omega_max), "tv_eccentric": c.velocity.tv_eccentric,
            "tv_half_concentric": c.velocity.tv_half_concentric,
            "theta_pe0_deg": math.degrees(c.passive.theta_zero), "theta_pe1_deg": math.degrees(c.passive.theta_one),
            "beta": c.beta, "tact_s": s.tact, "tdeact_s": s.tdeact,
            "fit": {"s_a": s.fit.s_a, "s_v": s.fit.s_v, "delta_p_deg": math.degrees(s.fit.delta_p),
                    "lambda_p": s.fit.lambda_p, "s_tau": s.fit.s_tau},
            "source": s.source})
    return {"format": FORMAT, "description": params.description if description is None else description,
            "mtgs": out}


def _frozen_girdle(das3: Das3Model):
    """(girdle angles, GH centre, scapula orientation, thoracohumeral angles, elbow, pronation) of the
    published equilibrium, from the DAS3 model's own kinematics (spec "Outputs" for the YZY angles)."""
    work = new_multibody_work()
    q = writable(das3.equilibrium_state[:das3.n_dof])     # a copy: the published state is read-only
    multibody_eval(das3.arrays, q, np.zeros(das3.n_dof), np.zeros(das3.n_dof), np.zeros(len(LOAD_NAMES)), work)
    R = work.R[HUMERUS_FRAME, :, :, 0]
    th = np.array([math.atan2(R[2, 1], -R[0, 1]), math.acos(min(1.0, max(-1.0, R[1, 1]))),
                   math.atan2(R[1, 2], R[1, 0])])
    return (q[:6].copy(), work.P[HUMERUS_FRAME, :, 0].copy(), work.R[SCAPULA_FRAME, :, :, 0].copy(), th,
            float(q[9]), float(q[10]))


REST_TOL_NM = 1e-9
"""Largest generalized force a rest posture may leave (N m)."""
SETTLE_S, SETTLE_STEP_S, SETTLE_CHUNK = 60.0, 0.004, 250
"""How long the arm may fall to rest, its step, and the steps between checks of its stillness."""
SETTLED_RAD_S = 1e-9
"""Every coordinate rate below this: the arm is still."""


def moment_scale(config) -> float:
    """s_F s_L: a subject's moments against the reference subject's (``sim.subject_size``: forces x s_F, moment arms
    x s_L), on the MTGs' tau_max (active and passive torque) and the elevation stops; the damping and the elbow and
    forearm stops come scaled with the DAS3 arm's passive joint moments (``arrays.joint_k``). 1 at scale 1."""
    return config.force_scale * config.length_scale if config.sized else 1.0


def _arrays(das3: Das3Model, params: MtgParameters, girdle, actuators: ActuatorPatient,
            reflex: ActuatorReflex, contracture: ContractureTable) -> MtgArrays:
    A = das3.arrays
    size = moment_scale(das3.config)
    girdle_q, gh_centre, scap_R = girdle[:3]
    frame_to_seg = {HUMERUS_FRAME: 0, HUMERUS_FRAME + 1: 1, HUMERUS_FRAME + 2: 2}
    bodies = [b for b in range(A.body_mass.shape[0]) if int(A.body_frame[b]) in frame_to_seg]
    start, width, coef, count = params.curve_tables
    act = np.array([[1.0 / s.tact - 1.0 / s.tdeact, 1.0 / s.tdeact] * 2 for s in params.mtgs])
    return MtgArrays(
        gh_centre=gh_centre, elbow_loc=A.joint_loc[9].copy(), elbow_axis=A.joint_axis[9].copy(),
        pron_loc=A.joint_loc[10].copy(), pron_axis=A.joint_axis[10].copy(),
        body_seg=np.array([frame_to_seg[int(A.body_frame[b])] for b in bodies], dtype=np.int64),
        body_mass=A.body_mass[bodies].copy(), body_com=A.body_com[bodies].copy(),
        body_inertia=A.body_inertia[bodies].copy(), body_weight=A.body_weight[bodies].copy(),
        gravity=A.gravity.copy(), hand_com=A.hand_com_radius.copy(),
        damping=np.full(5, A.joint_k[2]), scapula_R=scap_R, girdle_q=girdle_q,
        stop_lo=np.array([-np.inf, ELEVATION_STOPS_RAD[0], -np.inf, *das3.dof_ranges[9:11, 0]]),
        stop_hi=np.array([np.inf, ELEVATION_STOPS_RAD[1], np.inf, *das3.dof_ranges[9:11, 1]]),
        stop_k2=np.array([0.0, ELEVATION_STOP_K2 * size, 0.0, A.joint_k[1], A.joint_k[1]]),
        mtg_coord=np.array([s.coordinate for s in params.mtgs], dtype=np.int64),
        mtg_dir=np.array([float(s.direction) for s in params.mtgs]),
        mtg_const=np.array([[s.curves.active.theta_opt, s.curves.velocity.omega_max, s.curves.tau_max * strength * size,
                             s.curves.beta] for s, strength in zip(params.mtgs, actuators.strength)]),
        mtg_gate=np.array(actuators.gate, dtype=np.float64),
        reflex_mtg=reflex.mtg.copy(), reflex_share=reflex.share.copy(), reflex_rate=reflex.rate.copy(),
        reflex_gain=reflex.gain.copy(), reflex_threshold=reflex.threshold.copy(),
        contr_start=contracture.start.copy(), contr_step=contracture.step.copy(),
        contr_knots=contracture.n_knots.copy(), contr_value=contracture.value.copy(),
        contr_slope=contracture.slope.copy(),
        mtg_fit=np.array([[s.fit.s_a, s.fit.s_v, s.fit.delta_p, s.fit.lambda_a, s.fit.lambda_v, s.fit.lambda_p,
                           s.fit.s_tau] for s in params.mtgs]),
        mtg_act=act, curve_start=start, curve_width=width, curve_coef=coef,
        curve_count=count)


class MtgModel:
    """The reduced arm: immutable constants (``arrays``), names and the resting state.

    Shares the DAS3 model's interface where the service reads it: ``muscle_names`` are the MTG names (the
    stimulation map targets MTGs), ``dof_names`` and ``dof_ranges`` are the DAS3 DOFs the sensor frame reports
    (clavicle and scapula frozen, GH angles derived from the humerus). ``actuators`` and ``reflex``: the patient's
    factors on each MTG and the spastic elements' reflexes on them (:mod:`sim.mtg.patient`; all 1 and none for the
    published arm); ``contracture``: the contracted elements' extra passive moment on each coordinate
    (:mod:`sim.mtg.contracture`; none for the published arm)."""

    kind = "mtg"                 # the registered plant type it drives (hil.rt.plants)
    load_names = LOAD_NAMES      # the DAS3 arm's loads
    has_glenohumeral = False     # no GH force or stability (NaN in the frame)

    def __init__(self, das3: Das3Model, params: MtgParameters, actuators: ActuatorPatient | None = None,
                 reflex: ActuatorReflex | None = None, contracture: ContractureTable | None = None) -> None:
        self.das3 = das3
        self.segment_model = das3     # the DAS3 model of its segments (q in DAS3 order: their kinematics apply)
        self.params = params
        self.config = das3.config
        girdle = _frozen_girdle(das3)
        self.actuators = able_bodied(len(params.mtgs)) if actuators is None else actuators
        self.reflex = no_reflex() if reflex is None else reflex
        self.contracture = no_contracture() if contracture is None else contracture
        self.arrays = _arrays(das3, params, girdle, self.actuators, self.reflex, self.contracture)
        for a in self.arrays:
            a.flags.writeable = False
        self.muscle_names = list(params.names)
        self.n_muscles = len(self.muscle_names)
        self.dof_names = das3.dof_names
        self.dof_ranges = das3.dof_ranges
        self.coordinate_names = COORDINATES
        self.n_states = 10 + self.n_muscles
        identity = das3.data_sha256 + params.canonical_json
        if das3.config.sized:
            identity += repr((das3.config.length_scale, das3.config.mass_scale, das3.config.force_scale))
        if actuators is not None or reflex is not None or contracture is not None:
            identity += np.stack(self.actuators).tobytes().hex() + b"".join(r.tobytes() for r in self.reflex).hex()
            identity += b"".join(t.tobytes() for t in self.contracture).hex()
        self.data_sha256 = hashlib.sha256(identity.encode()).hexdigest()
        self.das3_posture = np.array([*girdle[3], girdle[4], girdle[5]])
        self._rest = None

    def state_problem(self, x: np.ndarray) -> str | None:
        """Why ``x`` (finite values: q 5, qd 5, activations) is no state of this arm, or None: activations in [0, 1],
        the elevation strictly between 0 and 180 deg (the YZY angles are singular at 0 and 180 deg)."""
        if np.any(x[10:] < 0.0) or np.any(x[10:] > 1.0):
            return "activations must lie in [0, 1]"
        if math.sin(x[1]) <= 0.0:
            return "the elevation must lie strictly between 0 and 180 deg"
        return None

    def voluntary_reach(self, patient) -> np.ndarray:
        """(n_mtg,) how much of each MTG the patient's own drive reaches (:mod:`sim.mtg.patient`; this model is
        built for ``patient``)."""
        return self.actuators.reach.copy()

    @property
    def equilibrium_state(self) -> np.ndarray:
        """The resting state (computed once, read-only)."""
        if self._rest is None:
            self._rest = self._rest_state(self.das3_posture)
            self._rest.flags.writeable = False
        return self._rest

    def generalized_forces(self, q, qd=None, a=None, loads=None) -> np.ndarray:
        """Q(q, qd, a) (5,) without inertia of qdd (offline use: allocates)."""
        work = new_mtg_work(self.arrays.body_mass.shape[0], self.n_muscles)
        qd = np.zeros(5) if qd is None else writable(qd)
        a = np.zeros(self.n_muscles) if a is None else writable(a)
        loads = np.zeros(len(LOAD_NAMES)) if loads is None else writable(loads)
        generalized_forces(self.arrays, writable(q), qd, a, loads, work)
        return work.Q.copy()

    def inverse_dynamics(self, q, qd, qdd, loads=None) -> np.ndarray:
        """(n, 5) coordinate torques T the MTGs must produce along the samples (rows of q, qd, qdd; ``loads`` one
        row of ``LOAD_NAMES`` for all or one per sample):
        M qdd = Q_bias - B qd + stops + k_j . (T_c basis_c) (shoulder) + T (elbow, forearm), solved for T."""
        q, qd, qdd = (np.atleast_2d(np.asarray(v, dtype=np.float64)) for v in (q, qd, qdd))
        loads = np.zeros(len(LOAD_NAMES)) if loads is None else np.asarray(loads, dtype=np.float64)
        loads = np.broadcast_to(loads, (q.shape[0], len(LOAD_NAMES)))
        work = new_mtg_work(self.arrays.body_mass.shape[0], self.n_muscles)
        out = np.empty((q.shape[0], 5))
        for j in range(q.shape[0]):
            bias_and_mass(self.arrays, writable(q[j]), writable(qd[j]), writable(loads[j]), work)
            needed = work.M @ qdd[j] - work.Q + self.arrays.damping * qd[j] - self.range_stops(q[j])
            axes = work.axis[:3].T
            out[j, :3] = np.linalg.solve(axes.T @ axes, needed[:3])
            out[j, 3:] = needed[3:]
        return out

    def range_stops(self, q) -> np.ndarray:
        """(5,) the range-stop moments K2 (lo - q)^2 [q < lo] - K2 (q - hi)^2 [q > hi] (``sim.mtg.arm``)."""
        A = self.arrays
        with np.errstate(invalid="ignore"):
            below = np.where(q < A.stop_lo, A.stop_k2 * (A.stop_lo - q) ** 2, 0.0)
            above = np.where(q > A.stop_hi, A.stop_k2 * (q - A.stop_hi) ** 2, 0.0)
        return below - above

    def shoulder_axes(self, q) -> np.ndarray:
        """(3, 3) columns e_y, z', y_h: the axes of the YZY joints, i.e. the basis the shoulder MTG and load
        moments act in (T_plane e_y + T_elev z' + T_axial y_h)."""
        work = new_mtg_work(self.arrays.body_mass.shape[0], self.n_muscles)
        kinematics(self.arrays, writable(q), np.zeros(5), work)
        return work.axis[:3].T.copy()

    def _rest_state(self, start: np.ndarray) -> np.ndarray:
        """The state where gravity and the passive MTG moments balance with all activations zero, from the DAS3
        equilibrium posture (:meth:`rest_posture`); none is :class:`MtgParameterError`."""
        q = self.rest_posture(np.zeros(self.n_muscles), start=start)
        if q is None:
            raise MtgParameterError("the MTG arm has no rest posture near the DAS3 one (gravity and the passive "
                                    f"moments leave more than {REST_TOL_NM:g} N m at the best posture found)")
        x = np.zeros(self.n_states)
        x[:5] = q
        return x

    def rest_posture(self, activation: np.ndarray, loads=None, start=None) -> np.ndarray | None:
        """The coordinates where the moments at ``activation`` (one per MTG), gravity and ``loads`` balance,
        Q(q, 0, a) = 0 with every |Q| <= :data:`REST_TOL_NM`, from ``start`` (default: the DAS3 equilibrium
        posture): least squares (a coordinate without a restoring moment stays put). Where that stalls (a coordinate
        that feels no moment of its own cannot cancel the moment the others couple into its row), the arm is let
        fall from there under the same activations until it is still (:meth:`_settled`) and balanced again. None
        when no such posture is found."""
        start = self.das3_posture if start is None else np.asarray(start, np.float64)
        a = np.asarray(activation, np.float64)
        q = self._balanced(start, a, loads)
        return q if q is not None else self._balanced(self._settled(start, a, loads), a, loads)

    def _balanced(self, start: np.ndarray, a: np.ndarray, loads) -> np.ndarray | None:
        """Least squares on Q(q, 0, a) = 0 from ``start``; None unless every |Q| <= :data:`REST_TOL_NM` there."""
        from scipy.optimize import least_squares  # imported where it is used: scipy.optimize is slow to import
        forces = lambda q: self.generalized_forces(q, None, a, loads)      # noqa: E731
        sol = least_squares(forces, start, x_scale=0.1, xtol=1e-14, ftol=1e-14, gtol=1e-14, max_nfev=500)
        q = sol.x
        return q if np.all(np.isfinite(q)) and np.max(np.abs(forces(q))) <= REST_TOL_NM else None

    def _settled(self, start: np.ndarray, a: np.ndarray, loads) -> np.ndarray:
        """The posture the arm comes to rest in from ``start`` holding the activations ``a`` (its own step, at most
        :data:`SETTLE_S`; the excitation a / gate holds them)."""
        x = np.zeros(self.n_states)
        x[:5], x[10:] = start, a
        work = new_mtg_work(self.arrays.body_mass.shape[0], self.n_muscles)
        gate = self.arrays.mtg_gate
        u = np.divide(a, gate, out=np.zeros(self.n_muscles), where=gate > 0.0)
        applied = np.zeros(self.n_muscles)
        loads = np.zeros(len(LOAD_NAMES)) if loads is None else np.asarray(loads, np.float64)
        for _ in range(round(SETTLE_S / SETTLE_STEP_S / SETTLE_CHUNK)):
            status, _, _ = mtg_steps(self.arrays, work, x, applied, u, loads, SETTLE_STEP_S, SETTLE_CHUNK)
            if status != MTG_STEP_OK or np.max(np.abs(x[5:10])) < SETTLED_RAD_S:
                break
        return x[:5].copy()


def mtg_model_for(model_config, patient, parameters: str | Path | None = None) -> MtgModel:
    """The MTG arm of a run: on the DAS3 segments of ``model_config`` (its strengths, denervation, reflexes and
    contractures left out: they reach the MTGs through :mod:`sim.mtg.patient` and :mod:`sim.mtg.contracture`), each
    MTG scaled for ``model_config`` (the patient applied, :func:`sim.patient.apply_patient`) and ``patient``.

    Built once per process for the same options, patient and parameter file (its path, modification time and
    size), as :func:`sim.das3.model.load_model` is: the model is immutable, and a batch of environments or a sweep
    asks for the same patient's arm once per arm."""
    path = None if parameters is None else str(parameters)
    return _mtg_model_for(model_config, patient, path, _file_stamp(path))


def _file_stamp(path: str | None) -> tuple[int, int] | None:
    """(modification time, size) of the file at ``path``; None without a file (reading it then says why)."""
    if path is None:
        return None
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size


@functools.lru_cache(maxsize=8)
def _mtg_model_for(model_config, patient, parameters: str | None, stamp) -> MtgModel:
    das3 = load_model(dataclasses.replace(model_config, strength=(), denervated=(), spasticity=(), contracture=()))
    return load_mtg_model(das3, parameters, model_config, patient)


def load_mtg_model(das3: Das3Model, parameters: str | Path | None = None, model_config=None,
                   patient=None) -> MtgModel:
    """The MTG arm on ``das3``'s segments with the parameter file ``parameters`` (default: the shipped one); with
    ``model_config`` (the patient applied) and ``patient``, each MTG scaled for the patient
    (:mod:`sim.mtg.patient`) and the contracted elements' passive moments added (:mod:`sim.mtg.contracture`)."""
    params = load_mtg_parameters(parameters)
    plain = MtgModel(das3, params)
    if patient is None:
        return plain
    actuators, reflex = patient_actuators(das3, plain.arrays, model_config, patient)
    contracture = (contracture_table(das3, plain.arrays, plain.equilibrium_state[:5], model_config.contracture)
                   if model_config.contracture else no_contracture())     # (the rest solve only where it is used)
    if (all(np.all(f == 1.0) for f in actuators) and reflex.mtg.shape[0] == 0
            and not contracture.n_knots.any()):
        return plain
    return MtgModel(das3, params, actuators, reflex, contracture)
