"""The DAS3 model at rest as a function of the static optimisation's unknowns (:mod:`sim.analysis.static_opt`):

    z = [q_free | alpha (one per muscle) | M (0 or 5)],   F = Fp(q) + alpha (Ff(q) - Fp(q)),

with forces, activations, f_eom, the thoracohumeral angles, GH stability, the scapulothoracic contact function,
the contact and conoid force magnitudes and their derivatives in z (:class:`RestModel`), and the geometry they
share with the checks of a solution.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from sim.das3.kernels.dual import slot_q as _slot_q_kernel
from sim.das3.kernels.muscles import fill_monomials, rest_state_from_force, solve_rest_lengths
from sim.das3.kernels.outputs import compute_outputs
from sim.das3.kernels.step import FIBRE_MIN, IA, IQ, IQD, IS, evaluate, new_plant_work
from sim.das3.model import (
    HUMERUS_FRAME,
    MUS_EXCITATION_GATE,
    MUS_FMAX,
    MUS_LCEOPT,
    MUS_SEESLACK,
    N_DOF,
    N_MUS,
    N_STATES,
    SCAPULA_FRAME,
    Das3Model,
)

REST_FIBRE_MIN = 2.0 * FIBRE_MIN
"""Shortest fibre (s, in L_CEopt) a solution may use: twice the plant's validity limit, so that a
solution played in the plant does not sit on the edge where a fibre collapses."""

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


slot_q = _slot_q_kernel.py_func
"""The dual slot of d/dq_j, in Python (a compiled kernel's call from Python costs a dispatch, and at import the
loading of its cache)."""
Q_SLOTS = slice(slot_q(0), slot_q(N_DOF - 1) + 1)
"""The dual slots holding d/dq_0 .. d/dq_10 (:mod:`sim.das3.kernels.dual`)."""


def contact_function_jacobian(A, W) -> np.ndarray:
    """(2, 11) dE/dq of TS and AI, exact: dE/dq_j = sum_i 2 (P_i - c_i) / a_i^2 dP_i/dq_j from the dual
    contact points of the last evaluation."""
    c = np.asarray(A.contact)
    P = W.mb.contact_P
    weight = 2.0 * (P[:, :, 0] - c[0:3]) / c[3:6] ** 2
    return np.einsum("pi,pij->pj", weight, P[:, :, Q_SLOTS])


def magnitude_and_jacobian(F: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(|F| (...), d|F|/dq (..., 11)) of dual 3-vectors F (..., 3, ND): d|F| = F . dF / |F| (0 at F = 0)."""
    value = np.linalg.norm(F[..., 0], axis=-1)
    unit = F[..., 0] / np.where(value > 0.0, value, 1.0)[..., None]
    return value, np.einsum("...i,...ij->...j", unit, F[..., Q_SLOTS])


@dataclass(frozen=True)
class OutputJacobians:
    """Rows over z of the outputs the inequality constraints use (:meth:`RestModel.output_jacobians`)."""

    stability: np.ndarray        # (n,) GH stability
    contact_e: np.ndarray        # (2, n) E of TS, AI
    contact_force: np.ndarray    # (2, n) N, magnitude of the contact force at TS, AI
    conoid_force: np.ndarray     # (n,) N, magnitude of the conoid ligament force


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


class RestRows(NamedTuple):
    """Forces, activations and f_eom at one (q, alpha), with their q-derivatives at fixed alpha (q-columns over
    the free DOFs)."""

    force: np.ndarray            # (138,) N
    activation: np.ndarray       # (138,)
    f_eom: np.ndarray            # (11,) N m
    J_force: np.ndarray          # (138, n_q)
    J_act: np.ndarray            # (138, n_q)
    J_eom: np.ndarray            # (11, n_q)


class RestModel:
    """The model at rest as a function of z (see the module docstring): forces, activations, f_eom,
    outputs and their derivatives, cached for the last z."""

    FD_STEP = 1e-7

    def __init__(self, model: Das3Model, loads: np.ndarray, q_template: np.ndarray, layout: Layout,
                 limits=None) -> None:
        self.model, self.A, self.loads, self.layout = model, model.arrays, np.array(loads, float), layout
        self.limits = limits        # the problem's sim.analysis.passive_limits.PassiveLimits (bounds, checks)
        self.W = new_plant_work(self.A)
        self.q_template = np.array(q_template, float)
        self.fmax = np.array(self.A.mus[:, MUS_FMAX])
        self.lceopt = np.array(self.A.mus[:, MUS_LCEOPT])
        self.gate = np.array(self.A.mus[:, MUS_EXCITATION_GATE])   # 0: denervated, no active range
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
        """(F (138,), dF/dL (138,)) of every muscle at rest with a = ``level`` (0 or 1) times its excitation gate
        at posture q (muscle lengths L); a muscle whose fibre would get shorter than ``s_min`` is held there (the
        most force it may carry)."""
        a = level * self.gate
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
        short = (Ff < Fp) | (self.gate == 0.0)     # fibre below REST_FIBRE_MIN, or denervated: no active range
        Ff[short], dFf[short] = Fp[short], dFp[short]
        span = Ff - Fp
        self._rest_parts = (q.copy(), L, Fp, dFp, dFf, span, np.array(loads))
        return self._state_at(alpha)

    def _state_at(self, alpha):
        """(F, dF/dL, span, x) at alpha with the posture and rest forces of the last :meth:`_state_of`."""
        q, L, Fp, dFp, dFf, span, loads = self._rest_parts
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
        self._kinematic_jacobians()
        self.stability, self.contact_e = self._outputs()
        out = W.out
        self.th = out.th_angles.copy()
        self.outputs = dict(gh_force=out.gh_force.copy(), gh_angles=out.gh_angles.copy(),
                            contact_force=out.contact_force.copy(), conoid_force=out.conoid_force.copy())
        self.dstab_dF = self._stability_force_gradient()
        self._key, self._jac_outputs = key, None
        return self

    def at_activation(self, alpha: np.ndarray) -> "RestRows":
        """The rows at ``alpha`` and the posture of the last :meth:`at` (q-columns over the free DOFs, at fixed
        alpha): the rest state (closed form) and one plant evaluation instead of a whole :meth:`at` (the rows are
        built as there). The cache of :meth:`at` is invalidated."""
        F, dF_dL, _, x = self._state_at(np.asarray(alpha, float))
        self._key = None
        mu, G, free = self.W.mu, self.moment_arms(), list(self.layout.free_dofs)
        dF_dq = dF_dL[:, None] * G
        J = self.W.st.Aq + G.T @ ((self.fmax * mu.dF4)[:, None] * G) - G.T @ dF_dq
        da_dL = -(mu.dF4 + mu.g_s / self.lceopt) / mu.g_a
        da_dF = mu.g_s / (self.lceopt * self.fmax * mu.dF4 * mu.g_a)
        J_act = (da_dL + da_dF * dF_dL)[:, None] * G
        return RestRows(F, x[IA:].copy(), self.W.st.f[IQD:IS].copy(), dF_dq[:, free], J_act[:, free], J[:, free])

    def rows(self, z: np.ndarray) -> "RestRows":
        """The rows of :meth:`at_activation` from a whole evaluation at z."""
        r, n = self.at(z), self.layout.n_q
        return RestRows(r.force, r.x[IA:], r.f_eom, r.J_force[:, :n], r.J_act[:, :n], r.J_eom[:, :n])

    def muscle_lengths(self) -> np.ndarray:
        """(138,) muscle-tendon lengths (m) at the posture of the last :meth:`at`."""
        return self._rest_parts[1]

    def _kinematic_jacobians(self) -> None:
        """Contact E, contact and conoid force magnitudes and their q-rows, exact from the dual slots of the
        last evaluation (each depends on q only)."""
        mb = self.W.mb
        self.contact_force_n, dC = magnitude_and_jacobian(mb.contact_F)
        conoid, dK = magnitude_and_jacobian(mb.conoid_F)
        self.conoid_force_n = float(conoid)
        self._dq_rows = (contact_function_jacobian(self.A, self.W), dC, dK)
        self.J_contact_e = self._zjac(self._dq_rows[0])

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
        _, grad_F = glenoid_stability(np.asarray(A.glenoid), np.asarray(A.gh_rim), out.gh_force)
        self._dstab_dgh = grad_F
        d = np.zeros(N_MUS)
        d[np.asarray(A.gh_muscle)] = unit_rows(np.asarray(out.loa).reshape(-1, 3)) @ grad_F
        return d

    def output_jacobians(self, z: np.ndarray) -> OutputJacobians:
        """The inequality outputs' rows over z. Contact E and forces are exact (dual slots). GH stability:
        alpha exactly through F (pure moments add no force at GH); q as d stab/dF . dF/dq (exact) plus the
        part at fixed F: the scapula's rotation exactly, the lines of action (polynomial fits the plant does
        not differentiate) by central differences of their monomials."""
        self.at(z)
        if self._jac_outputs is None:
            L = self.layout
            dE, dC, dK = self._dq_rows
            Js = self._zjac(self._stability_q_at_fixed_force()[None, :])[0]
            Js[:L.n_q] += self.dstab_dF @ self.J_force[:, :L.n_q]
            Js[L.alpha] = self.dstab_dF * self.span
            self._jac_outputs = OutputJacobians(Js, self._zjac(dE), self._zjac(dC), self._zjac(dK[None, :])[0])
        return self._jac_outputs

    def _stability_q_at_fixed_force(self) -> np.ndarray:
        """(11,) d stability / dq at the forces of z (0 outside the free DOFs): F_GH = R_scapula^T F_distal +
        sum_i F_i u_i (spec "Outputs"; F_distal, the weight and external forces below the humerus, does not
        depend on q at rest), so dF_GH/dq_j = dR^T/dq_j F_distal (exact, dual slots) + sum_i F_i du_i/dq_j,
        the unit lines of action differenced over the monomials alone."""
        A, W = self.A, self.W
        q, force = self.x[IQ:IQD], self.force[np.asarray(A.gh_muscle)]
        S, distal = W.mb.R[SCAPULA_FRAME], W.mb.gh_force_world
        free = self.layout.free_dofs
        raw = np.empty((len(free), 2, W.out.loa.shape[0]))
        for r, j in enumerate(free):
            for c, step in enumerate((self.FD_STEP, -self.FD_STEP)):
                qj = q.copy()
                qj[j] += step
                raw[r, c] = self._lines_of_action(qj)
        units = unit_rows(raw.reshape(len(free), 2, raw.shape[2] // 3, 3))
        du = (units[:, 0] - units[:, 1]) / (2 * self.FD_STEP)
        d = np.zeros(N_DOF)
        for r, j in enumerate(free):
            d[j] = self._dstab_dgh @ (S[:, :, slot_q(j)].T @ distal + du[r].T @ force)
        self._lines_of_action(q)          # the workspace back at z
        return d

    def _lines_of_action(self, q: np.ndarray) -> np.ndarray:
        """(3 n_gh,) GH line-of-action fits at q, rows 3 k + c (the outputs recomputed with the monomials of
        q; the workspace's array, valid until the next evaluation)."""
        fill_monomials(self.A, q, self.W.mu.mono)
        compute_outputs(self.A, self.W)
        return self.W.out.loa


def glenoid_stability(glenoid: np.ndarray, rim: np.ndarray, gh_force: np.ndarray) -> tuple[float, np.ndarray]:
    """(stability, d stability / d F_GH (3,)) of the GH force F_GH (scapula frame): (theta/theta_a)^2 +
    (phi/phi_a)^2 - 1 with theta = atan2(f_y, f_x), phi = atan2(f_z, f_x) of F_GH in the glenoid frame and
    (theta_a, phi_a) = ``rim`` (spec "Outputs")."""
    ta, pa = rim
    fx, fy, fz = glenoid @ gh_force
    theta, phi = math.atan2(fy, fx), math.atan2(fz, fx)
    d_theta = np.array([-fy, fx, 0.0]) / (fx * fx + fy * fy)
    d_phi = np.array([-fz, 0.0, fx]) / (fx * fx + fz * fz)
    gradient = glenoid.T @ (2 * theta / ta ** 2 * d_theta + 2 * phi / pa ** 2 * d_phi)
    return (theta / ta) ** 2 + (phi / pa) ** 2 - 1.0, gradient


def unit_rows(v: np.ndarray) -> np.ndarray:
    """v (..., 3) scaled to unit length along the last axis (zero rows stay zero)."""
    norm = np.linalg.norm(v, axis=-1)
    return v / np.where(norm > 0.0, norm, 1.0)[..., None]


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
