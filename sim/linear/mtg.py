"""The reduced MTG arm's linear model at an equilibrium (:mod:`sim.mtg.arm`, :mod:`sim.mtg.plant`).

The arm is explicit: x = (q (5), qdot (5), a (n MTGs)),

    q' = qdot,   qdot' = M(q)^-1 Q(q, qdot, a),   a' = (u - a)(c1 u + c2)     (Chadwick et al. 2014, eq. 1)

with Q the compiled generalized forces the plant's step evaluates (gravity, inertia at qdd = 0, the MTG torques of
Millard et al. 2019 Eq. (3), damping, range stops, a contracture's table and the loads; :func:`sim.mtg.arm.generalized_forces`).
The step has exact partial derivatives only of its stiff terms (the moment basis held fixed), so the mechanics rows
of A are central differences of M^-1 Q in x with step :data:`FD_STEP` (Q is linear in a: those columns are exact to
round-off), with a Richardson estimate of their error in the notes. The activation rows are exact: da'/da =
-(c1 u + c2), da'/du = c1 u + c2 + (u - a) c1, on the rising branch the plant takes at u = a. B is per commanded
excitation, the patient's gate applied (the plant applies gate * clip(u, 0, 1)).

Outputs are those of the sensor frame (:func:`sim.mtg.step.mtg_outputs`): q and qdot in the DAS3 DOF order (the
frozen girdle's rows zero, ELx and PSy the elbow and forearm coordinates exactly, the GH YZY angles and the hand
position by central differences in q; the GH rates are J(q) qdot exactly, J that Jacobian), and the thoracohumeral
angles, which are the first three coordinates.

Not linearised: the stretch reflex of a spastic element (delayed and thresholded: zero below the threshold, so exact
at rest).
"""
from __future__ import annotations

import numpy as np

from sim.linear.base import (
    HAND_NAMES,
    OUTPUT_FD_STEP_RAD,
    TH_NAMES,
    Inputs,
    LinearizeError,
    central_jacobian,
    parse_outputs,
    selection_inputs,
)
from sim.mtg.arm import N_COORD, generalized_forces, new_mtg_work
from sim.mtg.model import COORDINATES, REST_TOL_NM, MtgModel
from sim.mtg.step import refresh_outputs

FD_STEP = 1e-6
"""Central-difference step of the mechanics rows (rad, rad/s, activation): truncation ~ h^2 |F'''| and round-off
~ eps |F| / h both far below 1e-6 of the entries (a *proposal*; the notes give the Richardson estimate)."""
IQ, IQD, IA = 0, N_COORD, 2 * N_COORD
FRAME_COORDINATE = {"ELx": 3, "PSy": 4}
"""The sensor frame's DAS3 DOFs that are coordinates of the arm (the elbow and the forearm)."""


class MtgLinear:
    """The MTG arm as :mod:`sim.linear.operating` linearises it (a :class:`sim.linear.base.LinearView`)."""

    method = (f"A, B: central differences (step {FD_STEP:g}) of qdot' = M^-1 Q of the compiled generalized forces "
              "(sim.mtg.arm), activation rows exact (Chadwick et al. 2014 eq. 1)")
    iq, iqd, ia = IQ, IQD, IA
    rest_hint = "a posture (--posture), at which the arm's own rest solution balances it"

    def __init__(self, model: MtgModel) -> None:
        self.model = model
        self.n_states = model.n_states
        self.coordinate_names = COORDINATES
        self.positions = {**{name: j for j, name in enumerate(COORDINATES)}, **FRAME_COORDINATE}
        m = model.muscle_names
        self.state_names = (*(f"q_{n}" for n in COORDINATES), *(f"qdot_{n}" for n in COORDINATES),
                            *(f"a_{n}" for n in m))
        self._work = new_mtg_work(model.arrays.body_mass.shape[0], model.n_muscles)
        self._zero_loads = np.zeros(len(model.load_names))

    def gate(self) -> np.ndarray:
        return np.asarray(self.model.arrays.mtg_gate, np.float64)

    # -- dynamics --------------------------------------------------------------------------------------------------
    def _forces(self, x: np.ndarray, loads) -> tuple[np.ndarray, np.ndarray]:
        """(M, Q) at the state x."""
        W = self._work
        loads = self._zero_loads if loads is None else np.asarray(loads, np.float64)
        generalized_forces(self.model.arrays, x[IQ:IQD].copy(), x[IQD:IA].copy(), x[IA:].copy(), loads, W)
        return W.M.copy(), W.Q.copy()

    def _acceleration(self, x: np.ndarray, loads) -> np.ndarray:
        M, Q = self._forces(x, loads)
        return np.linalg.solve(M, Q)

    def _rising_rate(self, applied: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(c1 u + c2, c1) of the rising branch at the applied excitations."""
        c = self.model.arrays.mtg_act
        return c[:, 0] * applied + c[:, 1], c[:, 0]

    def residual(self, x0, excitation, loads=None) -> np.ndarray:
        """x'(x0, gate * u): zero at an equilibrium (the activation rate on the branch the plant takes)."""
        x0 = np.asarray(x0, float)
        applied = self.gate() * np.asarray(excitation, float)
        a = x0[IA:]
        c = self.model.arrays.mtg_act
        rate = np.where(applied >= a, c[:, 0] * applied + c[:, 1], c[:, 2] * applied + c[:, 3])
        return np.concatenate([x0[IQD:IA], self._acceleration(x0, loads), (applied - a) * rate])

    def state_matrices(self, x0, excitation, loads=None) -> tuple[np.ndarray, np.ndarray]:
        """(A, B) at (x0, u) (module docstring), B per commanded excitation."""
        x0 = np.asarray(x0, float)
        n, gate = self.model.n_muscles, self.gate()
        applied = gate * np.asarray(excitation, float)
        A = np.zeros((self.n_states, self.n_states))
        A[IQ:IQD, IQD:IA] = np.eye(N_COORD)
        A[IQD:IA] = central_jacobian(lambda x: self._acceleration(x, loads), x0, FD_STEP)
        rate, c1 = self._rising_rate(applied)
        A[IA:, IA:] = np.diag(-rate)
        B = np.zeros((self.n_states, n))
        B[IA:, :] = np.diag((rate + (applied - x0[IA:]) * c1) * gate)
        return A, B

    def fd_error(self, x0, A: np.ndarray, loads=None) -> float:
        """Richardson estimate of the mechanics rows' error, max |J(h) - J(2h)| / 3 relative to max |J(h)|, J(h)
        the rows of ``A`` (:meth:`state_matrices` at x0)."""
        J1 = A[IQD:IA]
        J2 = central_jacobian(lambda x: self._acceleration(x, loads), np.asarray(x0, float), 2.0 * FD_STEP)
        return float(np.max(np.abs(J1 - J2)) / 3.0 / np.max(np.abs(J1)))

    def rest_state(self, excitation, loads=None, x_guess=None) -> np.ndarray:
        """The rest state under excitations u: activations gate * u and the posture the arm's own rest solution finds
        from ``x_guess`` (default: the arm's resting state; :meth:`sim.mtg.model.MtgModel.rest_posture`)."""
        x = np.zeros(self.n_states)
        x[IA:] = self.gate() * np.asarray(excitation, float)
        start = (self.model.equilibrium_state if x_guess is None else np.asarray(x_guess, float))[IQ:IQD]
        q = self.model.rest_posture(x[IA:], loads, start)
        if q is None:
            raise LinearizeError("no rest posture under the operating inputs: gravity, the loads and the moments "
                                 f"leave more than {REST_TOL_NM:g} N m at the best posture found")
        x[IQ:IQD] = q
        return x

    def driven_states(self, B: np.ndarray) -> list[int]:
        """The activations of the MTGs the inputs drive (activation rows of B not zero)."""
        return [IA + m for m in range(self.model.n_muscles) if np.any(B[IA + m] != 0.0)]

    def excitation_inputs(self, select: list[str] | None = None, grouped: bool = False) -> Inputs:
        """MTG excitations as inputs; ``select``: MTG names (default: all)."""
        names = list(self.model.muscle_names)
        if grouped:
            raise LinearizeError("--inputs groups: the MTG arm has no muscle groups; its inputs are its MTGs "
                                 f"(excitations={','.join(names[:2])},...)")
        keys = names if select is None else select
        for key in keys:
            if key not in names:
                raise LinearizeError(f"--inputs: unknown MTG {key!r} (one of {', '.join(names)})")
        return selection_inputs(keys, [[names.index(k)] for k in keys], len(names))

    # -- outputs ---------------------------------------------------------------------------------------------------
    def _frame_kinematics(self, q: np.ndarray) -> np.ndarray:
        """The frame's q (11, DAS3 order), then the hand position (3), at q with the arm at rest."""
        x = np.zeros(self.n_states)
        x[IQ:IQD] = q
        refresh_outputs(self.model.arrays, self._work, x)
        return np.concatenate([self._work.q11, self._work.hand_position])

    def output_matrices(self, x0, spec: str = "q,qdot") -> tuple[np.ndarray, np.ndarray, tuple, list]:
        """(C, y0, output names, notes) of the outputs in ``spec`` (:func:`sim.linear.base.parse_outputs`, the
        sensor frame's DOFs)."""
        x0 = np.asarray(x0, float)
        q0, dofs = x0[IQ:IQD].copy(), self.model.dof_names
        value = self._frame_kinematics(q0)
        jac = central_jacobian(self._frame_kinematics, q0, OUTPUT_FD_STEP_RAD)
        for j in range(6):                                   # the frozen girdle
            jac[j] = 0.0
        for name, c in FRAME_COORDINATE.items():             # coordinates of the arm: rows of the identity
            jac[dofs.index(name)] = np.eye(1, N_COORD, c)[0]
        rows, y0, names = [], [], []
        for kind, dof in parse_outputs(dofs, spec):
            if kind in ("q", "qdot"):
                for j in (range(len(dofs)) if dof is None else (dof,)):
                    row = np.zeros(self.n_states)
                    row[(IQ if kind == "q" else IQD):(IQD if kind == "q" else IA)] = jac[j]
                    rows.append(row)
                    y0.append(value[j] if kind == "q" else float(jac[j] @ x0[IQD:IA]))
                    names.append(f"{kind}_{dofs[j]}")
                continue
            for r, name in enumerate(TH_NAMES if kind == "th_angles" else HAND_NAMES):
                row = np.zeros(self.n_states)
                if kind == "th_angles":
                    row[IQ + r] = 1.0
                    y0.append(q0[r])
                else:
                    row[IQ:IQD] = jac[len(dofs) + r]
                    y0.append(value[len(dofs) + r])
                rows.append(row)
                names.append(name)
        notes = [f"GH angle and rate, hand_position rows: central differences in q, step {OUTPUT_FD_STEP_RAD:g} rad "
                 "(ELx, PSy and th_angles are coordinates: exact rows)"]
        return np.array(rows), np.array(y0), tuple(names), notes


__all__ = ["FD_STEP", "IA", "IQ", "IQD", "MtgLinear"]
