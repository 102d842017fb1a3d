"""Static optimisation of the DAS3 muscles with the GH stability constraint (van der Helm 1994, "Inverse
dynamic optimization" and "Results"; Chadwick et al. 2014 §II-F for the DAS3 form f*(x, 0, 0, M) = 0).

Unknowns z = [q (11) | s (138) | a (138)] at rest (q̇ = 0, ṡ = 0, activation = excitation). Constraints:

- static equilibrium of the full model, f_eom(q, 0, s) = 0 (11) and the contraction equations
  g(q, s, 0, a) = 0 (138): passive muscle forces, conoid, scapulothoracic contact, joint stops and loads
  are all in the plant's own residual, with its exact Jacobian (:func:`sim.dynamics.jacobians`);
- the posture: thoracohumeral plane of elevation, elevation and axial rotation (spec "Outputs"), elbow
  flexion and pronation; with ``girdle`` given also the six clavicle and scapula angles;
- GH stability (paper eq. 9) ≤ ``gh_limit`` (0 = the glenoid rim; van der Helm App. C);
- scapula on the thorax: the ellipsoid function E of TS and AI ≤ 0 (no winging; Chadwick §II-F);
- 0 ≤ a ≤ 1 and q within the DOF ranges.

Criteria (van der Helm 1994, "Results" (a)-(d)), with F the muscle-tendon force Fmax·F4 (passive
included; the 1994 model had none) and PCSA = Fmax / 100 N/cm² (Chadwick 2014 App. A, eq. 12):
(a) Σ F², (b) Σ (F/PCSA)², (c) Σ (F_CE,active / (Fmax f_FL(Lce)))² = Σ a² at zero velocity,
(d) max F/PCSA, as an epigraph (min t with F/PCSA ≤ t), then, among the solutions with that maximum,
the one of criterion (b) (the max alone leaves the muscles below it undetermined: van der Helm's
"numerically unstable").
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from sim._dual import slot_q
from sim._outputs import compute_outputs
from sim._step import IA, IQ, IQD, IS, evaluate, new_plant_work
from sim.dynamics import jacobians
from sim.model import HUMERUS_FRAME, MUS_FMAX, MUS_LCEOPT, N_DOF, N_LOADS, N_MUS, N_STATES, Das3Model

SPECIFIC_TENSION = 100.0e4
"""N/m² (100 N/cm²): Fmax = PCSA x specific tension in DAS3 (Chadwick et al. 2014, App. A)."""
CRITERIA = ("a", "b", "c", "d")
ELBOW, PRONATION = 9, 10
GIRDLE = slice(0, 6)
N_Z = N_DOF + N_MUS
ZQ, ZA = 0, N_DOF


class StaticOptError(RuntimeError):
    """The optimisation found no solution that passes the checks."""


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


@dataclass(frozen=True)
class Tolerances:
    """Acceptance limits of :func:`check_state` (the solver's own "converged" is not trusted)."""

    eom_nm: float = 1e-6          # max |f_eom|, N m
    contraction: float = 1e-8     # max |g| (normalised by Fmax)
    posture_rad: float = 1e-6
    constraint: float = 1e-6      # GH stability, E of TS/AI, bounds


@dataclass
class Checks:
    eom_max_nm: float
    contraction_max: float
    posture_max_rad: float
    gh_stability: float
    contact_e: np.ndarray        # (2,) E of TS, AI (≤ 0: on or in the thorax)
    activation_range: tuple[float, float]
    joint_outside_rad: float     # largest excursion outside a DOF range
    passed: bool
    failures: list[str]


@dataclass
class StaticSolution:
    x: np.ndarray                # (298,) state at rest: [q | 0 | s | a]
    activation: np.ndarray       # (138,)
    force: np.ndarray            # (138,) N, muscle-tendon force
    criterion: str
    cost: float                  # criterion value in its own units (N², (N/cm²)², 1, N/cm²)
    th_angles: np.ndarray        # (3,) rad
    gh_force: np.ndarray         # (3,) N, on the scapula, scapula frame
    gh_angles: np.ndarray        # (2,) rad: theta, phi
    gh_stability: float
    contact_force: np.ndarray    # (2, 3) N at TS, AI, thorax frame
    conoid_force: np.ndarray     # (3,) N
    active: list[str]            # constraints at their limit
    iterations: int
    time_s: float
    checks: Checks


def thoracohumeral_angles(R: np.ndarray) -> np.ndarray:
    """Plane of elevation, elevation, axial rotation (YZY) of R = R_thorax->humerus (spec "Outputs")."""
    return np.array([math.atan2(R[2, 1], -R[0, 1]), math.acos(min(1.0, max(-1.0, R[1, 1]))),
                     math.atan2(R[1, 2], R[1, 0])])


def thoracohumeral_jacobian(Rd: np.ndarray) -> np.ndarray:
    """(3, 11) derivative of :func:`thoracohumeral_angles` from the dual rotation R (3, 3, ND) whose slot
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


class _RestState:
    """The model at rest for z = [q | a]: each muscle's s solved from its contraction equation g = 0 (so
    F and f_eom are functions of z; derivatives by the implicit function theorem from the plant's exact
    Jacobian), outputs and their derivatives, cached per z."""

    FD_STEP = 1e-7

    def __init__(self, model: Das3Model, loads: np.ndarray) -> None:
        self.model, self.A, self.loads = model, model.arrays, loads
        self.W = new_plant_work(self.A)
        self.fmax = np.array(self.A.mus[:, MUS_FMAX])
        self.lceopt = np.array(self.A.mus[:, MUS_LCEOPT])
        c = np.asarray(self.A.contact)
        self.thorax_centre, self.thorax_radii = c[0:3], c[3:6]
        self.xd = np.zeros(N_STATES)
        self.s = np.array(model.equilibrium_state[IS:IA])    # warm start of the contraction solve
        self._key = None

    def state(self, z: np.ndarray) -> np.ndarray:
        """x = [q | 0 | s | a] with the s last solved (call :meth:`at` first)."""
        x = np.zeros(N_STATES)
        x[IQ:IQD], x[IS:IA], x[IA:] = z[ZQ:ZA], self.s, z[ZA:N_Z]
        return x

    def _solve_s(self, z: np.ndarray) -> np.ndarray:
        from sim.equilibrium import _contraction_states

        x = self.state(z)
        _contraction_states(self.A, self.W, x, self.xd, x[IA:], self.loads)
        self.s = x[IS:IA].copy()
        return x

    def _outputs_at(self, x: np.ndarray):
        """(GH stability, E of TS and AI (2,)) at x."""
        evaluate(self.A, x, self.xd, x[IA:], self.loads, self.W)
        compute_outputs(self.A, self.W)
        P = self.W.mb.contact_P[:, :, 0]
        return float(self.W.out.gh_stability[0]), np.sum(((P - self.thorax_centre) / self.thorax_radii) ** 2,
                                                         axis=1) - 1.0

    def at(self, z: np.ndarray) -> "_RestState":
        """Make every attribute describe z: f_eom, force and their total derivatives, outputs."""
        key = z[:N_Z].tobytes()
        if key == self._key:
            return self
        x = self._solve_s(z)
        f, dfdx, _, _ = jacobians(self.model, x, self.xd, x[IA:], self.loads, work=self.W)
        mu = self.W.mu
        g_q, g_s, g_a = dfdx[IS:IA, IQ:IQD], mu.g_s.copy(), mu.g_a.copy()
        ds_dq, ds_da = -g_q / g_s[:, None], -g_a / g_s                      # from g(q, s(q, a), a) = 0
        eom_s = dfdx[IQD:IS, IS:IA]
        self.f_eom, self.g = f[IQD:IS], f[IS:IA]
        self.J_eom = np.hstack([dfdx[IQD:IS, IQ:IQD] + eom_s @ ds_dq, eom_s * ds_da])
        dF_ds = -self.fmax * mu.dF4 * self.lceopt                          # F = Fmax F4(L(q) - s Lceopt - slack)
        self.force = mu.force.copy()
        self.J_force = np.hstack([self.fmax[:, None] * g_q + dF_ds[:, None] * ds_dq, np.diag(dF_ds * ds_da)])
        self._ds_dq, self._dF_ds = ds_dq, dF_ds
        compute_outputs(self.A, self.W)
        W = self.W
        Rd = W.mb.R[HUMERUS_FRAME]
        self.th, self.J_th = thoracohumeral_angles(Rd[:, :, 0]), thoracohumeral_jacobian(Rd)
        self.outputs = (W.out.gh_force.copy(), W.out.gh_angles.copy(), float(W.out.gh_stability[0]),
                        W.out.contact_force.copy(), W.out.conoid_force.copy())
        self._dstab_dF = self._stability_force_gradient()
        self.stability, self.contact_e = self._outputs_at(x)
        self._x, self._key, self._jac_outputs = x, key, None
        return self

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
        """(d stability / dz (N_Z,), d E / dz (2, N_Z)): the q part by central differences at fixed s
        (the line-of-action fits and the contact geometry have no derivative in the plant) plus the
        path through s(q), the a part through F(a) (exact)."""
        self.at(z)
        if self._jac_outputs is None:
            Js, Je = np.zeros(N_Z), np.zeros((2, N_Z))
            x = self._x.copy()
            for k in range(N_DOF):
                x[IQ + k] += self.FD_STEP
                sp, ep = self._outputs_at(x)
                x[IQ + k] -= 2 * self.FD_STEP
                sm, em = self._outputs_at(x)
                x[IQ + k] += self.FD_STEP
                Js[k], Je[:, k] = (sp - sm) / (2 * self.FD_STEP), (ep - em) / (2 * self.FD_STEP)
            dstab_ds = self._dstab_dF * self._dF_ds
            Js[:N_DOF] += dstab_ds @ self._ds_dq
            Js[ZA:] = self._dstab_dF * (self.J_force[np.arange(N_MUS), ZA + np.arange(N_MUS)])
            self._outputs_at(self._x)
            self._jac_outputs = (Js, Je)
        return self._jac_outputs


def _posture_targets(posture: Posture) -> tuple[np.ndarray, np.ndarray]:
    """(DOF indices held directly, their values): elbow, pronation and, if given, the girdle."""
    idx, val = [ELBOW, PRONATION], [posture.elbow_flexion, posture.pronation]
    if posture.girdle is not None:
        if len(posture.girdle) != 6 or not all(math.isfinite(v) for v in posture.girdle):
            raise ValueError("girdle must be six finite angles (SCy, SCz, SCx, ACy, ACz, ACx), rad")
        idx += list(range(6))
        val += list(posture.girdle)
    return np.array(idx), np.array(val, float)


def _th_target(posture: Posture) -> np.ndarray:
    return np.array([posture.plane_of_elevation, posture.elevation, posture.axial_rotation])


def _angle_error(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a - b wrapped to (-pi, pi]."""
    return (a - b + math.pi) % (2 * math.pi) - math.pi


def initial_guess(rest: _RestState, posture: Posture, activation: float = 0.02) -> np.ndarray:
    """z0: the published equilibrium's girdle (or the given one), the humerus turned by Newton on the GH
    angles to the thoracohumeral target, elbow and pronation set, each s solved for ``activation``."""
    model = rest.model
    idx, val = _posture_targets(posture)
    x = np.array(model.equilibrium_state)
    x[IQD:IS] = 0.0
    x[IQ + idx] = val
    x[IA:] = activation
    z = z_of(x)
    gh = np.arange(6, 9)
    for _ in range(30):
        rest.at(z)
        err = _angle_error(rest.th, _th_target(posture))
        if np.max(np.abs(err)) < 1e-12:
            break
        z[gh] -= np.linalg.lstsq(rest.J_th[:, gh], err, rcond=None)[0]
    return z


def _padded(J: np.ndarray, n_var: int) -> np.ndarray:
    if J.shape[-1] == n_var:
        return J
    out = np.zeros(J.shape[:-1] + (n_var,))
    out[..., :J.shape[-1]] = J
    return out


def _equalities(rest: _RestState, posture: Posture, n_var: int) -> dict:
    """f_eom = 0 (g = 0 holds by construction), thoracohumeral angles, held DOFs."""
    idx, val = _posture_targets(posture)
    target = _th_target(posture)

    def fun(z):
        r = rest.at(z)
        return np.concatenate([r.f_eom, _angle_error(r.th, target), z[idx] - val])

    def jac(z):
        r = rest.at(z)
        held = np.zeros((len(idx), N_Z))
        held[np.arange(len(idx)), idx] = 1.0
        J_th = np.zeros((3, N_Z))
        J_th[:, :N_DOF] = r.J_th
        return _padded(np.vstack([r.J_eom, J_th, held]), n_var)

    return {"type": "eq", "fun": fun, "jac": jac}


def _inequalities(rest: _RestState, gh_limit: float | None, girdle_free: bool, n_var: int) -> list[dict]:
    """GH stability <= gh_limit (if not None) and, with the girdle free, E(TS), E(AI) <= 0 (as >= 0 forms)."""
    out = []
    if gh_limit is not None:
        out.append({"type": "ineq", "fun": lambda z: np.array([gh_limit - rest.at(z).stability]),
                    "jac": lambda z: _padded(-rest.output_jacobians(z)[0][None, :], n_var)})
    if girdle_free:
        out.append({"type": "ineq", "fun": lambda z: -rest.at(z).contact_e,
                    "jac": lambda z: _padded(-rest.output_jacobians(z)[1], n_var)})
    return out


def _objective(rest: _RestState, criterion: str, n_var: int):
    """(fun, jac, scale to the criterion's units) of criteria (a)-(c) (see the module docstring)."""
    if criterion == "c":
        def fun(z):
            return float(np.sum(z[ZA:N_Z] ** 2))

        def jac(z):
            g = np.zeros(n_var)
            g[ZA:N_Z] = 2 * z[ZA:N_Z]
            return g
        return fun, jac, 1.0
    ref = np.full(N_MUS, 1000.0) if criterion == "a" else rest.fmax
    scale = 1e6 if criterion == "a" else (SPECIFIC_TENSION * 1e-4) ** 2   # N², (N/cm²)²

    def fun(z):
        return float(np.sum((rest.at(z).force / ref) ** 2))

    def jac(z):
        r = rest.at(z)
        return _padded(2 * (r.force / ref ** 2) @ r.J_force, n_var)
    return fun, jac, scale


def _bounds(model: Das3Model, n_var: int) -> list[tuple[float, float]]:
    """q within its range, 0 <= a <= 1, t free."""
    b = [tuple(r) for r in np.asarray(model.dof_ranges)] + [(0.0, 1.0)] * N_MUS
    return b + [(None, None)] * (n_var - N_Z)


def _run_slsqp(fun, jac, z0, constraints, bounds, max_iterations: int):
    res = minimize(fun, z0, jac=jac, method="SLSQP", bounds=bounds, constraints=constraints,
                   options={"maxiter": max_iterations, "ftol": 1e-12})
    return res.x, int(res.nit)


def _min_max_stress(rest, posture, z0, gh_limit, max_iterations):
    """Criterion (d), stage 1: min t subject to F_i / Fmax_i <= t (the epigraph of max F/PCSA)."""
    n_var = N_Z + 1
    cons = [_equalities(rest, posture, n_var), *_inequalities(rest, gh_limit, posture.girdle is None, n_var),
            {"type": "ineq", "fun": lambda z: z[N_Z] - rest.at(z).force / rest.fmax,
             "jac": lambda z: np.hstack([-rest.at(z).J_force / rest.fmax[:, None], np.ones((N_MUS, 1))])}]
    t0 = float(np.max(rest.at(z0).force / rest.fmax))
    grad = np.zeros(n_var)
    grad[N_Z] = 1.0
    z, its = _run_slsqp(lambda z: float(z[N_Z]), lambda z: grad, np.append(z0, t0), cons,
                        _bounds(rest.model, n_var), max_iterations)
    return z[:N_Z], float(z[N_Z]), its


def solve_static(model: Das3Model, posture: Posture, loads=None, criterion: str = "b",
                 gh_limit: float | None = 0.0, x0: np.ndarray | None = None, max_iterations: int = 300,
                 tolerances: Tolerances = Tolerances()) -> StaticSolution:
    """Muscle activations (and, with ``posture.girdle`` None, the girdle angles) that hold ``posture``
    under ``loads`` at minimum ``criterion`` with GH stability <= ``gh_limit`` (None: unconstrained).
    ``x0``: a warm start (e.g. the previous posture's :attr:`StaticSolution.x`).
    Raises :class:`StaticOptError` when the result fails :func:`check_state`."""
    if criterion not in CRITERIA:
        raise ValueError(f"criterion must be one of {', '.join(CRITERIA)}, not {criterion!r}")
    loads = np.zeros(N_LOADS) if loads is None else np.asarray(loads, float)
    if loads.shape != (N_LOADS,) or not np.all(np.isfinite(loads)):
        raise ValueError(f"loads must be {N_LOADS} finite values (sim.model.LOAD_NAMES)")
    t_start = time.perf_counter()
    rest = _RestState(model, loads)
    if x0 is None:
        z = initial_guess(rest, posture)
    else:
        z, rest.s = z_of(np.asarray(x0, float)), np.array(x0[IS:IA], float)
    iterations = 0
    if criterion == "d":
        z, t_max, iterations = _min_max_stress(rest, posture, z, gh_limit, max_iterations)
    fun, jac, scale = _objective(rest, "b" if criterion == "d" else criterion, N_Z)
    cons = [_equalities(rest, posture, N_Z), *_inequalities(rest, gh_limit, posture.girdle is None, N_Z)]
    if criterion == "d":     # stage 2: criterion (b) among the solutions whose max F/PCSA is t_max
        cap = t_max * (1 + 1e-6) + 1e-9
        cons.append({"type": "ineq", "fun": lambda z: cap - rest.at(z).force / rest.fmax,
                     "jac": lambda z: -rest.at(z).J_force / rest.fmax[:, None]})
    f0 = max(fun(z), 1e-12)
    z, its = _run_slsqp(lambda z: fun(z) / f0, lambda z: jac(z) / f0, z, cons, _bounds(model, N_Z),
                        max_iterations)
    iterations += its
    rest.at(z)
    checks = check_state(model, rest.state(z), posture, loads, gh_limit, tolerances)
    cost = float(np.max(rest.at(z).force / rest.fmax)) * SPECIFIC_TENSION * 1e-4 if criterion == "d" \
        else fun(z) * scale
    return _solution(rest, z, posture, criterion, cost, gh_limit, iterations, time.perf_counter() - t_start, checks)


def z_of(x: np.ndarray) -> np.ndarray:
    """The optimiser's z = [q | a] of a rest state x."""
    return np.concatenate([x[IQ:IQD], x[IA:]])


def check_state(model: Das3Model, x: np.ndarray, posture: Posture, loads, gh_limit: float | None,
                tol: Tolerances = Tolerances()) -> Checks:
    """Re-evaluate a rest state with the plant's own residual (:func:`sim.dynamics.residual`, xdot = 0,
    u = a) and outputs, and test every condition of the problem against ``tol``."""
    from sim.dynamics import residual

    f = residual(model, x, np.zeros(N_STATES), x[IA:], loads)
    rest = _RestState(model, np.asarray(loads, float))
    stability, contact_e = rest._outputs_at(x)
    th = thoracohumeral_angles(rest.W.mb.R[HUMERUS_FRAME][:, :, 0])
    idx, val = _posture_targets(posture)
    posture_err = max(float(np.max(np.abs(_angle_error(th, _th_target(posture))))),
                      float(np.max(np.abs(x[IQ + idx] - val))))
    lo, hi = np.asarray(model.dof_ranges).T
    q = x[IQ:IQD]
    outside = float(max(0.0, np.max(lo - q), np.max(q - hi)))
    a = x[IA:]
    c = Checks(eom_max_nm=float(np.max(np.abs(f[IQD:IS]))), contraction_max=float(np.max(np.abs(f[IS:IA]))),
               posture_max_rad=posture_err, gh_stability=stability, contact_e=contact_e,
               activation_range=(float(a.min()), float(a.max())), joint_outside_rad=outside,
               passed=True, failures=[])
    tests = [(c.eom_max_nm <= tol.eom_nm, f"equations of motion residual {c.eom_max_nm:.3g} N m"),
             (c.contraction_max <= tol.contraction, f"contraction residual {c.contraction_max:.3g}"),
             (posture_err <= tol.posture_rad, f"posture off by {math.degrees(posture_err):.3g} deg"),
             (gh_limit is None or c.gh_stability <= gh_limit + tol.constraint,
              f"GH stability {c.gh_stability:+.4f} above the limit {gh_limit}"),
             (posture.girdle is not None or np.all(c.contact_e <= tol.constraint),
              f"scapula off the thorax (E of TS, AI = {c.contact_e[0]:+.3g}, {c.contact_e[1]:+.3g})"),
             (a.min() >= -tol.constraint and a.max() <= 1 + tol.constraint,
              f"activation outside [0, 1] ({a.min():.3g}..{a.max():.3g})"),
             (outside <= tol.constraint, f"a joint {math.degrees(outside):.3g} deg outside its range")]
    c.failures = [msg for ok, msg in tests if not ok]
    c.passed = not c.failures
    return c


def _active_constraints(rest: _RestState, z: np.ndarray, gh_limit, girdle_free: bool, model) -> list[str]:
    """Names of the inequality constraints at their limit (within 1e-6) at z."""
    r = rest.at(z)
    active = []
    if gh_limit is not None and r.stability >= gh_limit - 1e-6:
        active.append("gh_stability")
    if girdle_free:
        active += [f"scapula_on_thorax_{p}" for p, e in zip(("TS", "AI"), r.contact_e) if e >= -1e-6]
    a = z[ZA:N_Z]
    names = model.muscle_names
    active += [f"activation_max:{names[i]}" for i in np.flatnonzero(a >= 1 - 1e-6)]
    lo, hi = np.asarray(model.dof_ranges).T
    q = z[ZQ:ZA]
    active += [f"joint_range:{model.dof_names[j]}" for j in np.flatnonzero((q <= lo + 1e-6) | (q >= hi - 1e-6))]
    return active


def _solution(rest, z, posture, criterion, cost, gh_limit, iterations, elapsed, checks) -> StaticSolution:
    r = rest.at(z)
    gh_force, gh_angles, gh_stability, contact, conoid = r.outputs
    x = rest.state(z)
    return StaticSolution(
        x=x, activation=x[IA:].copy(), force=r.force.copy(), criterion=criterion, cost=cost,
        th_angles=r.th.copy(), gh_force=gh_force, gh_angles=gh_angles, gh_stability=gh_stability,
        contact_force=contact, conoid_force=conoid,
        active=_active_constraints(rest, z, gh_limit, posture.girdle is None, rest.model),
        iterations=iterations, time_s=elapsed, checks=checks)
