"""Static optimisation of the DAS3 muscles with the GH stability constraint (van der Helm 1994, "Inverse
dynamic optimization" and "Results"; Chadwick et al. 2014 §II-F for the DAS3 form f*(x, 0, 0, M) = 0).

At rest (q̇ = 0, ṡ = 0, activation = excitation) each muscle's force F_i lies between its passive rest
force Fp_i(q) (a = 0) and its full rest force Ff_i(q) (a = 1, or the force at the shortest valid fibre
``REST_FIBRE_MIN`` where full activation would shorten it further). The unknowns are

    z = [q_free | alpha (138) | M (0 or 5)],   F = Fp(q) + alpha (Ff(q) - Fp(q)),  0 <= alpha <= 1,

so the equations of motion f_eom = Q(q, M) - G(q)^T F are linear in F at a fixed posture; each muscle's
s and a follow from its F in closed form (:func:`sim.das3.kernels.muscles.rest_state_from_force`), so the
contraction equations g = 0 hold by construction. Constraints:

- f_eom = 0 (11): passive muscle forces, conoid, scapulothoracic contact, joint stops and loads are all in
  the plant's own residual; derivatives from its exact Jacobian (:func:`sim.das3.kernels.step.evaluate`);
- the posture: elbow and pronation held; with ``girdle`` given the whole q is fixed (the GH angles solved
  from the thoracohumeral target), otherwise the girdle and GH angles are free and the thoracohumeral
  YZY angles are equality constraints;
- GH stability (Chadwick eq. 9; van der Helm App. C) <= ``gh_limit`` (0 = at the glenoid rim);
- with the girdle free, TS and AI not lifted off the thorax: the ellipsoid function E <= 0 (Chadwick §II-F,
  "to prevent scapular winging"; the DAS3 contact is a penalty force, so E = 0 exactly would carry none).

Criteria (van der Helm 1994, "Results" (a)-(d)), F the muscle-tendon force (passive included; the 1994
model had none) and PCSA = Fmax / 100 N/cm² (Chadwick 2014 App. A): (a) Σ F², (b) Σ (F/PCSA)²,
(c) Σ a², which at zero velocity is Σ (F_CE,active / (Fmax f_FL(Lce)))², the paper's Σ (F/Fmax(l))² for the
active part; (d) max F/PCSA as an epigraph (min t, F/PCSA <= t), then criterion (b) among the solutions
within 1e-6 of that t, since the max alone leaves every muscle below it undetermined (the paper's
"numerically unstable").
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import minimize

from sim.das3.kernels.dual import slot_q
from sim.das3.kernels.muscles import rest_state_from_force, solve_rest_lengths
from sim.das3.kernels.outputs import compute_outputs
from sim.das3.kernels.step import FIBRE_MIN, IA, IQ, IQD, IS, evaluate, new_plant_work
from sim.das3.model import HUMERUS_FRAME, MUS_FMAX, MUS_LCEOPT, MUS_SEESLACK, N_DOF, N_LOADS, N_MUS, N_STATES, Das3Model

SPECIFIC_TENSION_N_PER_CM2 = 100.0
"""Fmax = PCSA x 100 N/cm² in DAS3 (Chadwick et al. 2014, App. A)."""
REST_FIBRE_MIN = 2.0 * FIBRE_MIN
"""Shortest fibre (s, in L_CEopt) a solution may use: twice the plant's validity limit, so that a
solution played in the plant does not sit on the edge where a fibre collapses."""
CRITERIA = ("a", "b", "c", "d")
CRITERION_UNITS = {"a": "N^2", "b": "(N/cm^2)^2", "c": "1", "d": "N/cm^2"}
ELBOW, PRONATION = 9, 10
GIRDLE_DOFS = tuple(range(6))
GH_DOFS = (6, 7, 8)
GH_STEP_MAX_RAD = 0.2
"""Largest GH-angle change per Newton step of :func:`place_humerus` (its Jacobian is singular at 0 and
180 deg elevation, where a full step can throw the humerus several turns)."""
N_MOMENTS = 5
"""The five external moments of Chadwick eq. 10 (loads M_th_y, M_th_z, M_hum_y, M_elbow, M_pronation)."""


class StaticOptError(RuntimeError):
    """The optimisation found no solution that passes the checks (message: the failed checks);
    ``solution``: the best point found, with its checks (None if there is none)."""

    def __init__(self, message: str, solution: "StaticSolution | None" = None) -> None:
        super().__init__(message, solution)
        self.solution = solution


@dataclass(frozen=True)
class Posture:
    """Thoracohumeral YZY angles, elbow flexion and pronation (rad); ``girdle``: the six clavicle and
    scapula angles (rad) to hold, or None to let the optimiser find them."""

    plane_of_elevation: float
    elevation: float
    axial_rotation: float
    elbow_flexion: float
    pronation: float
    girdle: tuple[float, ...] | None = None

    def th_target(self) -> np.ndarray:
        return np.array([self.plane_of_elevation, self.elevation, self.axial_rotation])


@dataclass(frozen=True)
class Tolerances:
    """Acceptance limits of :func:`check_state` (the solver's own "converged" is not trusted)."""

    eom_nm: float = 1e-6          # max |f_eom|, N m
    contraction: float = 1e-9     # max |g| (normalised by Fmax)
    posture_rad: float = 1e-6
    constraint: float = 1e-6      # GH stability, E of TS/AI, activation bounds


@dataclass
class Checks:
    eom_max_nm: float
    contraction_max: float
    posture_max_rad: float
    gh_stability: float
    contact_e: np.ndarray        # (2,) E of TS, AI (<= 0: on or in the thorax)
    activation_range: tuple[float, float]
    joint_outside_rad: float     # largest excursion outside a DOF range (joint stops act; reported only)
    passed: bool
    failures: list[str] = field(default_factory=list)


def angle_error(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a - b wrapped to (-pi, pi]."""
    return (a - b + math.pi) % (2 * math.pi) - math.pi


def thoracohumeral_jacobian(Rd: np.ndarray) -> np.ndarray:
    """(3, 11) derivative of the thoracohumeral angles (:func:`sim.das3.kernels.outputs.compute_outputs`, spec
    "Outputs": YZY of R = R_thorax->humerus) from the dual rotation R (3, 3, ND) whose slot
    ``slot_q(j)`` holds dR/dq_j (exact; singular at 0 and 180 deg elevation, where plane and axial
    rotation are undefined)."""
    R = Rd[:, :, 0]
    J = np.zeros((3, N_DOF))
    for j in range(N_DOF):
        dR = Rd[:, :, slot_q(j)]
        y, x = R[2, 1], -R[0, 1]
        J[0, j] = (x * dR[2, 1] + y * dR[0, 1]) / (x * x + y * y)
        J[1, j] = -dR[1, 1] / math.sqrt(max(1e-300, 1.0 - R[1, 1] ** 2))
        y, x = R[1, 2], R[1, 0]
        J[2, j] = (x * dR[1, 2] - y * dR[1, 0]) / (x * x + y * y)
    return J


def contact_function(A, W) -> np.ndarray:
    """E of TS and AI (spec "Scapulothoracic contact"): < 0 inside the thorax ellipsoid, > 0 lifted off."""
    c = np.asarray(A.contact)
    P = W.mb.contact_P[:, :, 0]
    return np.sum(((P - c[0:3]) / c[3:6]) ** 2, axis=1) - 1.0


@dataclass(frozen=True)
class Layout:
    """Where each unknown lives in z: the free DOFs, the 138 alphas, the free external moments."""

    free_dofs: tuple[int, ...]
    n_moments: int = 0
    n_extra: int = 0          # e.g. the epigraph variable t of criterion (d), after everything else

    @property
    def n_q(self) -> int:
        return len(self.free_dofs)

    @property
    def alpha(self) -> slice:
        return slice(self.n_q, self.n_q + N_MUS)

    @property
    def moments(self) -> slice:
        return slice(self.n_q + N_MUS, self.n_q + N_MUS + self.n_moments)

    @property
    def size(self) -> int:
        return self.n_q + N_MUS + self.n_moments + self.n_extra

    def with_extra(self, n: int) -> "Layout":
        return Layout(self.free_dofs, self.n_moments, n)


class RestModel:
    """The model at rest as a function of z (see the module docstring): forces, activations, f_eom,
    outputs and their derivatives, cached for the last z."""

    FD_STEP = 1e-7

    def __init__(self, model: Das3Model, loads: np.ndarray, q_template: np.ndarray, layout: Layout) -> None:
        self.model, self.A, self.loads, self.layout = model, model.arrays, np.array(loads, float), layout
        self.W = new_plant_work(self.A)
        self.q_template = np.array(q_template, float)
        self.fmax = np.array(self.A.mus[:, MUS_FMAX])
        self.lceopt = np.array(self.A.mus[:, MUS_LCEOPT])
        self.shortest_path = shortest_valid_path(model)
        self.path_rows = np.flatnonzero(crosses_any(model, layout.free_dofs))
        self.xd = np.zeros(N_STATES)
        self._dof_slots = np.arange(self.A.mus_dofs.shape[1]) < np.asarray(self.A.mus_ndof)[:, None]
        self._s_guess = {a: np.array(model.equilibrium_state[IS:IA]) for a in (0.0, 1.0)}
        self._key = None

    # --- pieces -----------------------------------------------------------------------------------
    def q_of(self, z: np.ndarray) -> np.ndarray:
        q = self.q_template.copy()
        q[list(self.layout.free_dofs)] = z[:self.layout.n_q]
        return q

    def loads_of(self, z: np.ndarray) -> np.ndarray:
        loads = self.loads.copy()
        loads[:self.layout.n_moments] += z[self.layout.moments]
        return loads

    def _evaluate(self, q, s, a, loads) -> np.ndarray:
        x = np.zeros(N_STATES)
        x[IQ:IQD], x[IS:IA], x[IA:] = q, s, a
        evaluate(self.A, x, self.xd, x[IA:], loads, self.W)
        return x

    def _rest_force(self, q, L, level: float, s_min: float):
        """(F (138,), dF/dL (138,)) of every muscle at rest with a = ``level`` (0 or 1) at posture q (muscle
        lengths L); a muscle whose fibre would get shorter than ``s_min`` is held there (the most force
        it may carry)."""
        a = np.full(N_MUS, level)
        s = self._s_guess[level]
        solve_rest_lengths(self.A, L, a, s, s_min, 1e-13, 200)
        self._evaluate(q, s, a, self.loads)
        mu = self.W.mu
        clamped = np.abs(mu.g) > 1e-9
        dF4 = mu.dF4.copy()
        dF_dL = self.fmax * dF4 * np.where(clamped, 1.0, 1.0 + self.lceopt * dF4 / mu.g_s)
        return mu.force.copy(), dF_dL

    def _state_of(self, q, alpha, loads):
        """(F, dF/dL at fixed alpha, dF/dalpha = Ff - Fp, x) with the plant evaluated at the rest state."""
        self._evaluate(q, self._s_guess[0.0], np.zeros(N_MUS), self.loads)      # muscle lengths L(q)
        L = self.W.mu.L.copy()
        Fp, dFp = self._rest_force(q, L, 0.0, FIBRE_MIN)
        Ff, dFf = self._rest_force(q, L, 1.0, REST_FIBRE_MIN)
        short = Ff < Fp                  # passive fibre already below REST_FIBRE_MIN: no active range
        Ff[short], dFf[short] = Fp[short], dFp[short]
        span = Ff - Fp
        F = Fp + alpha * span
        s, a = np.empty(N_MUS), np.empty(N_MUS)
        rest_state_from_force(self.A, L, F, s, a)
        x = self._evaluate(q, s, a, loads)
        return F, dFp + alpha * (dFf - dFp), span, x

    def moment_arms(self) -> np.ndarray:
        """(138, 11) dL_i/dq_j of the last evaluation."""
        G = np.zeros((N_MUS, N_DOF))
        muscle, slot = np.nonzero(self._dof_slots)
        G[muscle, self.A.mus_dofs[muscle, slot]] = self.W.mu.G[muscle, slot]
        return G

    def _outputs(self):
        """(GH stability, E of TS/AI) of the last evaluation."""
        compute_outputs(self.A, self.W)
        return float(self.W.out.gh_stability[0]), contact_function(self.A, self.W)

    # --- everything at z --------------------------------------------------------------------------
    def at(self, z: np.ndarray) -> "RestModel":
        key = z.tobytes()
        if key == self._key:
            return self
        L = self.layout
        q, loads, alpha = self.q_of(z), self.loads_of(z), z[L.alpha]
        F, dF_dL, span, x = self._state_of(q, alpha, loads)
        W, mu = self.W, self.W.mu
        self.x, self.force, self.span = x, F, span
        self.f_eom = W.st.f[IQD:IS].copy()
        G = self.moment_arms()
        self.path_margin = (mu.L - self.shortest_path)[self.path_rows]
        self.J_path = self._zjac(G[self.path_rows])
        stiff = G.T @ ((self.fmax * mu.dF4)[:, None] * G)            # F-dependence removed: fixed F
        dF_dq = dF_dL[:, None] * G
        self.J_force = self._zjac(dF_dq, np.diag(span))
        self.J_eom = self._zjac((W.st.Aq + stiff - G.T @ dF_dq), -G.T * span, self._moment_matrix(x, loads))
        da_dL = -(mu.dF4 + mu.g_s / self.lceopt) / mu.g_a
        da_dF = mu.g_s / (self.lceopt * self.fmax * mu.dF4 * mu.g_a)
        self.J_act = self._zjac((da_dL + da_dF * dF_dL)[:, None] * G, np.diag(da_dF * span))
        self.J_th = self._zjac(thoracohumeral_jacobian(W.mb.R[HUMERUS_FRAME]))
        self.stability, self.contact_e = self._outputs()
        out = W.out
        self.th = out.th_angles.copy()
        self.outputs = dict(gh_force=out.gh_force.copy(), gh_angles=out.gh_angles.copy(),
                            contact_force=out.contact_force.copy(), conoid_force=out.conoid_force.copy())
        self.dstab_dF = self._stability_force_gradient()
        self._key, self._jac_outputs = key, None
        return self

    def _zjac(self, d_dq: np.ndarray, d_dalpha: np.ndarray | None = None, d_dm: np.ndarray | None = None):
        """Assemble a Jacobian over z from its parts (q over all 11 DOFs; the free columns are kept)."""
        L = self.layout
        J = np.zeros((d_dq.shape[0], L.size))
        J[:, :L.n_q] = d_dq[:, list(L.free_dofs)]
        if d_dalpha is not None:
            J[:, L.alpha] = d_dalpha
        if d_dm is not None and L.n_moments:
            J[:, L.moments] = d_dm
        return J

    def _moment_matrix(self, x, loads) -> np.ndarray | None:
        """d f_eom / dM (11, n_moments): f_eom is linear in the moments, so unit differences are exact."""
        n = self.layout.n_moments
        if not n:
            return None
        base = self.W.st.f[IQD:IS].copy()
        B = np.zeros((N_DOF, n))
        for k in range(n):
            unit = loads.copy()
            unit[k] += 1.0
            evaluate(self.A, x, self.xd, x[IA:], unit, self.W)
            B[:, k] = self.W.st.f[IQD:IS] - base
        evaluate(self.A, x, self.xd, x[IA:], loads, self.W)
        return B

    def _stability_force_gradient(self) -> np.ndarray:
        """d stability / d F_i (138,): F_GH = ... + sum_i F_i d_i over the GH-crossing muscles (spec
        "Outputs"), stability = (theta/theta_a)^2 + (phi/phi_a)^2 - 1 of F_GH in the glenoid frame."""
        A, out = self.A, self.W.out
        G, (ta, pa) = np.asarray(A.glenoid), np.asarray(A.gh_rim)
        fx, fy, fz = G @ out.gh_force
        theta, phi = math.atan2(fy, fx), math.atan2(fz, fx)
        d_theta = np.array([-fy, fx, 0.0]) / (fx * fx + fy * fy)
        d_phi = np.array([-fz, 0.0, fx]) / (fx * fx + fz * fz)
        grad_F = G.T @ (2 * theta / ta ** 2 * d_theta + 2 * phi / pa ** 2 * d_phi)
        loa = np.asarray(out.loa).reshape(-1, 3)
        d = np.zeros(N_MUS)
        d[np.asarray(A.gh_muscle)] = (loa / np.linalg.norm(loa, axis=1)[:, None]) @ grad_F
        return d

    def output_jacobians(self, z: np.ndarray):
        """(d stability / dz, d E / dz (2, n)): alpha exactly through F (pure moments add no force at
        GH), the free DOFs by central differences at fixed alpha (the line-of-action fits and the contact
        points have no derivative in the plant)."""
        self.at(z)
        if self._jac_outputs is None:
            L = self.layout
            Js, Je = np.zeros(L.size), np.zeros((2, L.size))
            Js[L.alpha] = self.dstab_dF * self.span
            alpha, loads = z[L.alpha], self.loads_of(z)
            for k in range(L.n_q):
                values = []
                for step in (self.FD_STEP, -self.FD_STEP):
                    zk = z.copy()
                    zk[k] += step
                    self._state_of(self.q_of(zk), alpha, loads)
                    values.append(self._outputs())
                (sp, ep), (sm, em) = values
                Js[k], Je[:, k] = (sp - sm) / (2 * self.FD_STEP), (ep - em) / (2 * self.FD_STEP)
            self._jac_outputs = (Js, Je)     # the workspace now holds the last difference; z's values are kept
        return self._jac_outputs


def _held(posture: Posture) -> dict[int, float]:
    """DOF -> value for the DOFs the posture fixes directly: elbow, pronation and, if given, the girdle."""
    held = {ELBOW: posture.elbow_flexion, PRONATION: posture.pronation}
    if posture.girdle is not None:
        if len(posture.girdle) != 6 or not all(math.isfinite(v) for v in posture.girdle):
            raise ValueError("girdle must be six finite angles (SCy, SCz, SCx, ACy, ACz, ACx), rad")
        held.update(zip(GIRDLE_DOFS, posture.girdle))
    return held


def place_humerus(model: Das3Model, q: np.ndarray, target: np.ndarray, iterations: int = 60) -> np.ndarray:
    """q with the GH angles turned (Newton on the exact thoracohumeral Jacobian, steps limited to
    ``GH_STEP_MAX_RAD`` and the angles kept in (-pi, pi], where the muscle-path polynomials are fitted)
    so that the thoracohumeral angles are ``target``, the other DOFs as given. Raises StaticOptError if
    Newton does not converge."""
    A, W = model.arrays, new_plant_work(model.arrays)
    q = np.array(q, float)
    x, xd = np.array(model.equilibrium_state), np.zeros(N_STATES)
    gh = list(GH_DOFS)
    for _ in range(iterations):
        x[IQ:IQD] = q
        evaluate(A, x, xd, x[IA:], np.zeros(N_LOADS), W)
        compute_outputs(A, W)
        err = angle_error(W.out.th_angles, target)
        if np.max(np.abs(err)) < 1e-13:
            return q
        step = np.linalg.lstsq(thoracohumeral_jacobian(W.mb.R[HUMERUS_FRAME])[:, gh], err, rcond=None)[0]
        q[gh] = angle_error(q[gh] - np.clip(step, -GH_STEP_MAX_RAD, GH_STEP_MAX_RAD), 0.0)
    raise StaticOptError(f"cannot place the humerus at thoracohumeral angles {np.degrees(target).round(3)} deg "
                         f"from this girdle (Newton left an error of {np.degrees(np.max(np.abs(err))):.3g} deg)")


def start_posture(model: Das3Model, posture: Posture, q_start: np.ndarray | None) -> np.ndarray:
    """All 11 angles to start from: ``q_start`` or the published equilibrium, with the held DOFs set and
    the humerus placed at the thoracohumeral target."""
    q = np.array(model.equilibrium_state[IQ:IQD] if q_start is None else q_start, float)
    for dof, value in _held(posture).items():
        q[dof] = value
    return place_humerus(model, q, posture.th_target())


def layout_for(posture: Posture, n_moments: int) -> Layout:
    return Layout(free_dofs=solved_dofs(posture), n_moments=n_moments)


def solved_dofs(posture: Posture) -> tuple[int, ...]:
    """The DOFs the optimiser chooses: girdle and GH with the girdle free, none with it given."""
    return () if posture.girdle is not None else GIRDLE_DOFS + GH_DOFS


def equalities(rest: RestModel, posture: Posture) -> dict:
    """f_eom = 0 and, with the GH angles free, the thoracohumeral angles."""
    target = posture.th_target()
    with_th = bool(rest.layout.n_q)

    def fun(z):
        r = rest.at(z[:rest.layout.size])
        parts = [r.f_eom] + ([angle_error(r.th, target)] if with_th else [])
        return np.concatenate(parts)

    def jac(z):
        r = rest.at(z[:rest.layout.size])
        return pad_columns(np.vstack([r.J_eom] + ([r.J_th] if with_th else [])), z.size)

    return {"type": "eq", "fun": fun, "jac": jac}


def pad_columns(J: np.ndarray, n: int) -> np.ndarray:
    """J with zero columns appended up to n (for the extra variables after the layout)."""
    if J.shape[-1] == n:
        return J
    out = np.zeros(J.shape[:-1] + (n,))
    out[..., :J.shape[-1]] = J
    return out


def inequalities(rest: RestModel, gh_limit: float | None) -> list[dict]:
    """GH stability <= gh_limit (if not None) and, with the girdle free, E(TS), E(AI) <= 0 (as >= 0)."""
    n = rest.layout.size
    cons = []
    if gh_limit is not None:
        cons.append({"type": "ineq", "fun": lambda z: np.array([gh_limit - rest.at(z[:n]).stability]),
                     "jac": lambda z: pad_columns(-rest.output_jacobians(z[:n])[0][None, :], z.size)})
    if rest.layout.n_q:
        cons.append({"type": "ineq", "fun": lambda z: -rest.at(z[:n]).contact_e,
                     "jac": lambda z: pad_columns(-rest.output_jacobians(z[:n])[1], z.size)})
        cons.append({"type": "ineq", "fun": lambda z: rest.at(z[:n]).path_margin,
                     "jac": lambda z: pad_columns(rest.at(z[:n]).J_path, z.size)})
    return cons


def crosses_any(model: Das3Model, dofs) -> np.ndarray:
    """(138,) bool: the muscle's path depends on one of ``dofs``. Only those paths are the optimiser's
    choice; a path the posture fixes may be slack with a compressed tendon, which the plant allows."""
    free = set(dofs)
    return np.array([bool(free.intersection(d)) for d in model.muscle_dof_indices])


def shortest_valid_path(model: Das3Model) -> np.ndarray:
    """(138,) m: the tendon slack length plus the shortest valid fibre (FIBRE_MIN L_CEopt). A path
    polynomial below it (at girdle corners some fits even go negative) leaves no rest state with a
    stretched tendon and a valid fibre: the posture is outside the path model."""
    mus = model.arrays.mus
    return np.asarray(mus[:, MUS_SEESLACK] + FIBRE_MIN * mus[:, MUS_LCEOPT])


def _criterion(rest: RestModel, criterion: str):
    """(fun, jac) of criterion (a), (b) or (c) in its own units (module docstring)."""
    n = rest.layout.size
    if criterion == "c":
        def values(r):
            return r.x[IA:], r.J_act
    else:
        weight = np.ones(N_MUS) if criterion == "a" else SPECIFIC_TENSION_N_PER_CM2 / rest.fmax

        def values(r):
            return weight * r.force, weight[:, None] * r.J_force

    def fun(z):
        v, _ = values(rest.at(z[:n]))
        return float(v @ v)

    def jac(z):
        v, J = values(rest.at(z[:n]))
        return pad_columns(2 * v @ J, z.size)

    return fun, jac


def bounds(model: Das3Model, layout: Layout, q0: np.ndarray) -> list[tuple]:
    """Free DOFs within their range, widened to contain the start (the published equilibrium has ACz and
    ACx 3 deg outside theirs), 0 <= alpha <= 1, moments and extra variables free. Beyond the ranges, in
    the girdle's corners, muscle paths become shorter than their tendons: no valid rest state."""
    ranges = np.asarray(model.dof_ranges)
    b = [(min(ranges[j, 0], q0[j]), max(ranges[j, 1], q0[j])) for j in layout.free_dofs]
    return b + [(0.0, 1.0)] * N_MUS + [(None, None)] * (layout.n_moments + layout.n_extra)


@dataclass(frozen=True)
class SolverSettings:
    max_iterations: int = 500
    ftol: float = 1e-10
    restarts: int = 2        # SLSQP runs again from its last point (a fresh quasi-Newton matrix) if the
                             # constraints are not met there


def run_slsqp(fun, jac, z0, constraints, bounds, settings: SolverSettings, floor: float = 1.0):
    """SLSQP (dense SQP with exact first derivatives: suits ~150 unknowns with 11-14 nonlinear equalities;
    IPOPT would need a system library the package index does not ship). The objective is scaled by its
    start value (at least ``floor``). Returns (z, iterations)."""
    scale = max(abs(fun(z0)), floor)
    res = minimize(lambda z: fun(z) / scale, z0, jac=lambda z: jac(z) / scale, method="SLSQP",
                   bounds=bounds, constraints=constraints,
                   options={"maxiter": settings.max_iterations, "ftol": settings.ftol})
    return res.x, int(res.nit)


OBJECTIVE_FLOOR = {"a": 1e4, "b": 1e2, "c": 1e-2}
"""Objective scales when the start value is smaller (e.g. criterion (c) from a = 0)."""


@dataclass
class StaticSolution:
    x: np.ndarray                # (298,) state at rest: [q | 0 | s | a]
    activation: np.ndarray       # (138,)
    force: np.ndarray            # (138,) N, muscle-tendon force
    criterion: str
    cost: float                  # criterion value in CRITERION_UNITS
    th_angles: np.ndarray        # (3,) rad
    gh_force: np.ndarray         # (3,) N, on the scapula, scapula frame
    gh_angles: np.ndarray        # (2,) rad: theta, phi
    gh_stability: float
    contact_force: np.ndarray    # (2, 3) N at TS, AI, thorax frame
    conoid_force: np.ndarray     # (3,) N
    moments: np.ndarray          # (n_moments,) N m, the free external moments (max-moment problems)
    active: list[str]            # constraints at their limit
    iterations: int
    time_s: float
    checks: Checks


def solve_static(model: Das3Model, posture: Posture, loads=None, criterion: str = "b",
                 gh_limit: float | None = 0.0, q_start: np.ndarray | None = None,
                 settings: SolverSettings = SolverSettings(),
                 tolerances: Tolerances = Tolerances()) -> StaticSolution:
    """Muscle activations (and, with ``posture.girdle`` None, the girdle angles) that hold ``posture``
    under ``loads`` at minimum ``criterion`` with GH stability <= ``gh_limit`` (None: unconstrained).
    ``q_start``: the 11 angles to start from (e.g. the previous posture's, for a trajectory).
    Raises :class:`StaticOptError` when the result fails :func:`check_state`."""
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {', '.join(CRITERIA)}, not {criterion!r}")
    t_start = time.perf_counter()
    rest, z, cons = rest_problem(model, posture, loads, gh_limit, q_start, 0)
    iterations = 0
    if criterion == "d":
        z, cap, iterations = _min_max_stress(rest, z, cons, settings)
        cons.append(cap)
    fun, jac = _criterion(rest, "b" if criterion == "d" else criterion)
    z, its = optimise(rest, fun, jac, z, cons, settings, tolerances, OBJECTIVE_FLOOR["b" if criterion == "d" else criterion])
    iterations += its
    r = rest.at(z)
    cost = float(np.max(r.force / rest.fmax)) * SPECIFIC_TENSION_N_PER_CM2 if criterion == "d" else fun(z)
    return finish(rest, z, posture, criterion, cost, gh_limit, iterations, t_start, tolerances)


def rest_problem(model: Das3Model, posture: Posture, loads, gh_limit: float | None, q_start, n_moments: int):
    """(RestModel, start z: the start posture's free angles, alpha = 0, M = 0, the constraints) of a
    problem at ``posture`` with ``n_moments`` free external moments."""
    q0 = start_posture(model, posture, q_start)
    layout = layout_for(posture, n_moments)
    rest = RestModel(model, checked_loads(loads), q0, layout)
    z = np.concatenate([q0[list(layout.free_dofs)], np.zeros(N_MUS + n_moments)])
    return rest, z, [equalities(rest, posture), *inequalities(rest, gh_limit)]


def optimise(rest: RestModel, fun, jac, z: np.ndarray, cons: list, settings: SolverSettings, tol: Tolerances,
             floor: float) -> tuple[np.ndarray, int]:
    """SLSQP within the layout's bounds, run again from its last point (up to ``settings.restarts``
    times) while a constraint is not met there. Returns (z, total iterations)."""
    total = 0
    for _ in range(1 + settings.restarts):
        z, its = run_slsqp(fun, jac, z, cons, bounds(rest.model, rest.layout, rest.q_template), settings, floor)
        total += its
        if _satisfied(z, cons, tol):
            break
    return z, total


def _satisfied(z: np.ndarray, cons: list, tol: Tolerances) -> bool:
    """Every constraint within the acceptance tolerances at z (equalities to ``eom_nm``)."""
    for c in cons:
        v = np.atleast_1d(c["fun"](z))
        if (c["type"] == "eq" and np.max(np.abs(v)) > tol.eom_nm) or (c["type"] == "ineq" and v.min() < -tol.constraint):
            return False
    return True


def checked_loads(loads) -> np.ndarray:
    loads = np.zeros(N_LOADS) if loads is None else np.asarray(loads, float)
    if loads.shape != (N_LOADS,) or not np.all(np.isfinite(loads)):
        raise ValueError(f"loads must be {N_LOADS} finite values (sim.das3.model.LOAD_NAMES)")
    return loads


def _min_max_stress(rest: RestModel, z0: np.ndarray, cons: list, settings: SolverSettings):
    """Criterion (d), stage 1: min t with F_i/PCSA_i <= t (epigraph; t the one extra variable).
    Returns (z, the stage-2 constraint F/PCSA <= t (1 + 1e-6), iterations)."""
    n = rest.layout.size
    stress = SPECIFIC_TENSION_N_PER_CM2 / rest.fmax
    epigraph = {"type": "ineq", "fun": lambda z: z[n] - stress * rest.at(z[:n]).force,
                "jac": lambda z: np.hstack([-stress[:, None] * rest.at(z[:n]).J_force, np.ones((N_MUS, 1))])}
    grad = np.zeros(n + 1)
    grad[n] = 1.0
    t0 = float(np.max(stress * rest.at(z0).force))
    q0 = rest.q_template
    z, its = run_slsqp(lambda z: float(z[n]), lambda z: grad, np.append(z0, t0), cons + [epigraph],
                    bounds(rest.model, rest.layout.with_extra(1), q0), settings)
    cap = z[n] * (1 + 1e-6)
    second = {"type": "ineq", "fun": lambda z: cap - stress * rest.at(z[:n]).force,
              "jac": lambda z: pad_columns(-stress[:, None] * rest.at(z[:n]).J_force, z.size)}
    return z[:n], second, its


def check_state(model: Das3Model, x: np.ndarray, posture: Posture, loads, gh_limit: float | None,
                tol: Tolerances = Tolerances()) -> Checks:
    """Re-evaluate a rest state with the plant's own residual (:func:`sim.das3.dynamics.residual` with
    xdot = 0 and u = a, so the activation rows vanish too) and outputs, and test every condition of the
    problem against ``tol``."""
    from sim.das3.dynamics import residual

    loads = checked_loads(loads)
    W = new_plant_work(model.arrays)
    f = residual(model, x, np.zeros(N_STATES), x[IA:], loads, work=W)
    compute_outputs(model.arrays, W)
    th = W.out.th_angles
    held = _held(posture)
    posture_err = max(float(np.max(np.abs(angle_error(th, posture.th_target())))),
                      max(abs(x[IQ + dof] - v) for dof, v in held.items()))
    lo, hi = np.asarray(model.dof_ranges).T
    q, a = x[IQ:IQD], x[IA:]
    chosen = crosses_any(model, solved_dofs(posture))
    short = np.where(chosen, W.mu.L - shortest_valid_path(model), np.inf)
    worst = int(np.argmin(short))
    c = Checks(eom_max_nm=float(np.max(np.abs(f[IQD:IS]))), contraction_max=float(np.max(np.abs(f[IS:IA]))),
               posture_max_rad=posture_err, gh_stability=float(W.out.gh_stability[0]),
               contact_e=contact_function(model.arrays, W), activation_range=(float(a.min()), float(a.max())),
               joint_outside_rad=float(max(0.0, np.max(lo - q), np.max(q - hi))), passed=True)
    tests = [(c.eom_max_nm <= tol.eom_nm, f"equations of motion residual {c.eom_max_nm:.3g} N m"),
             (c.contraction_max <= tol.contraction, f"contraction residual {c.contraction_max:.3g}"),
             (posture_err <= tol.posture_rad, f"posture off by {math.degrees(posture_err):.3g} deg"),
             (gh_limit is None or c.gh_stability <= gh_limit + tol.constraint,
              f"GH stability {c.gh_stability:+.4f} above the limit {gh_limit}"),
             (posture.girdle is not None or bool(np.all(c.contact_e <= tol.constraint)),
              f"scapula off the thorax (E of TS, AI = {c.contact_e[0]:+.3g}, {c.contact_e[1]:+.3g})"),
             (a.min() >= -tol.constraint and a.max() <= 1 + tol.constraint,
              f"activation outside [0, 1] ({a.min():.3g}..{a.max():.3g})"),
             (short[worst] >= -tol.constraint,
              f"muscle path {model.muscle_names[worst]} {-short[worst] * 1e3:.1f} mm shorter than its tendon "
              "slack plus the shortest valid fibre (outside the path model)")]
    c.failures = [msg for ok, msg in tests if not ok]
    c.passed = not c.failures
    return c


def _active_constraints(rest: RestModel, z: np.ndarray, gh_limit) -> list[str]:
    """Names of the inequality constraints at their limit (within 1e-6) at z."""
    r, L, model = rest.at(z), rest.layout, rest.model
    active = []
    if gh_limit is not None and r.stability >= gh_limit - 1e-6:
        active.append("gh_stability")
    if L.n_q:
        active += [f"scapula_on_thorax:{p}" for p, e in zip(("TS", "AI"), r.contact_e) if e >= -1e-6]
        active += [f"path_length:{model.muscle_names[rest.path_rows[i]]}" for i in np.flatnonzero(r.path_margin <= 1e-6)]
    alpha = z[L.alpha]
    active += [f"force_max:{model.muscle_names[i]}" for i in np.flatnonzero(alpha >= 1 - 1e-6)]
    lo, hi = np.asarray(model.dof_ranges).T
    q = r.x[IQ:IQD]
    active += [f"joint_range:{model.dof_names[j]}" for j in L.free_dofs if q[j] <= lo[j] + 1e-6 or q[j] >= hi[j] - 1e-6]
    return active


def finish(rest: RestModel, z, posture, criterion, cost, gh_limit, iterations, t_start, tol) -> StaticSolution:
    """The solution at z, checked with the plant's residual; raises StaticOptError if a check fails."""
    r = rest.at(z)
    x = r.x.copy()
    loads = rest.loads_of(z)
    checks = check_state(rest.model, x, posture, loads, gh_limit, tol)
    sol = StaticSolution(
        x=x, activation=x[IA:].copy(), force=r.force.copy(), criterion=criterion, cost=cost,
        th_angles=r.th.copy(), gh_stability=r.stability, moments=z[rest.layout.moments].copy(),
        active=_active_constraints(rest, z, gh_limit), iterations=iterations,
        time_s=time.perf_counter() - t_start, checks=checks, **r.outputs)
    if not checks.passed:
        raise StaticOptError("; ".join(checks.failures), sol)
    return sol
