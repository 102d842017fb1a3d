"""The DAS3 model's linear model at an equilibrium, from the exact Jacobians of its implicit form.

The plant is f(x, x', u) = 0 (:mod:`sim.das3.dynamics`, x = [q | qdot | s | a], 298 states, u the 138 excitations).
At an equilibrium (x0, u0) with f(x0, 0, u0) = 0, df/dx' = blockdiag(-I, -M, diag(dg/ds'), I) is regular (M the
mass matrix; dg/ds' < 0 through the contraction damping), so the implicit function theorem gives x' = F(x, u) near it
with

    A = dF/dx = -(df/dx')^-1 df/dx,      B = dF/du = -(df/dx')^-1 df/du

(the same exact pieces as the plant's Rosenbrock step, Chadwick et al. 2014 eq. 8, and the reference solver's
Jacobian, :mod:`sim.das3.reference`). Outputs y = C x: joint angles and velocities are rows of the identity; the
thoracohumeral angles and the hand position depend on q alone and are differentiated by central differences of the
plant's own output kernel with step :data:`sim.linear.base.OUTPUT_FD_STEP_RAD` (the model has no exact Jacobian of
them). A rest state under given excitations is the model's own rest solution
(:func:`sim.das3.equilibrium.solve_equilibrium`).

Not linearised: the stretch reflex of a spastic element (delayed, thresholded; zero below its threshold, so exact
at rest); the activation law's rise/fall switch of the Thelen 2003 option (the rise branch is taken at u = a).
"""
from __future__ import annotations

import numpy as np

from sim.das3.dynamics import jacobians, residual
from sim.das3.equilibrium import EquilibriumError, solve_equilibrium
from sim.das3.kernels.outputs import compute_outputs
from sim.das3.kernels.step import IA, IQ, IQD, IS, evaluate, new_plant_work
from sim.das3.layout import MUS_EXCITATION_GATE, N_DOF, N_LOADS, N_MUS, N_STATES, Das3Model
from sim.das3.muscle_groups import element_indices, group_members, unknown_muscle
from sim.linear.base import (
    HAND_NAMES,
    OUTPUT_FD_STEP_RAD,
    TH_NAMES,
    Inputs,
    LinearizeError,
    central_jacobian,
    kinematic_note,
    parse_outputs,
    selection_inputs,
)


class Das3Linear:
    """The DAS3 plant as :mod:`sim.linear.operating` linearises it (a :class:`sim.linear.base.LinearView`)."""

    method = "A = -(df/dx')^-1 df/dx, B = -(df/dx')^-1 df/du from the exact Jacobians (sim.das3.dynamics)"
    iq, iqd, ia = IQ, IQD, IA
    rest_hint = "a rest state ('hil model equilibrium --out') or a posture (--posture)"

    def __init__(self, model: Das3Model) -> None:
        self.model = model
        self.n_states = N_STATES
        self.coordinate_names = tuple(model.dof_names)
        self.positions = {name: j for j, name in enumerate(model.dof_names)}
        """The names a posture or a reduction takes, each its coordinate (q and qdot states iq + j, iqd + j)."""
        d, m = model.dof_names, model.muscle_names
        self.state_names = (*(f"q_{n}" for n in d), *(f"qdot_{n}" for n in d), *(f"s_{n}" for n in m),
                            *(f"a_{n}" for n in m))

    def gate(self) -> np.ndarray:
        """The plant applies gate * clip(u, 0, 1) (a denervated element: gate 0)."""
        return np.asarray(self.model.arrays.mus[:, MUS_EXCITATION_GATE], np.float64)

    def residual(self, x0, excitation, loads=None) -> np.ndarray:
        """f(x0, 0, gate * u) (298,): zero at an equilibrium."""
        return residual(self.model, x0, np.zeros(N_STATES), self.gate() * np.asarray(excitation, float), loads)

    def state_matrices(self, x0, excitation, loads=None) -> tuple[np.ndarray, np.ndarray]:
        """(A (298x298), B (298x138)) at (x0, x' = 0, u): B per commanded excitation (the gate applied)."""
        gate = self.gate()
        _, dfdx, dfdxd, dfdu = jacobians(self.model, x0, np.zeros(N_STATES), gate * np.asarray(excitation, float),
                                         loads)
        return -np.linalg.solve(dfdxd, dfdx), -np.linalg.solve(dfdxd, dfdu) * gate[None, :]

    def rest_state(self, excitation, loads=None, x_guess=None) -> np.ndarray:
        """The rest state under excitations u (:func:`sim.das3.equilibrium.solve_equilibrium`)."""
        try:
            return solve_equilibrium(self.model, self.gate() * np.asarray(excitation, float), loads, x_guess).x
        except (EquilibriumError, ValueError) as exc:
            raise LinearizeError(f"no rest posture under the operating inputs: {exc}") from None

    def fd_error(self, x0, A: np.ndarray, loads=None) -> None:
        """None: A and B are exact (no finite differences to estimate the error of)."""
        return None

    def driven_states(self, B: np.ndarray) -> list[int]:
        """The fibre states and activations of the muscles the inputs drive (activation rows of B not zero)."""
        act = [IA + i for i in range(N_MUS) if np.any(B[IA + i] != 0.0)]
        return [IS + i - IA for i in act] + act

    def excitation_inputs(self, select: list[str] | None = None, grouped: bool = False) -> Inputs:
        """Element excitations (or whole groups, :mod:`sim.das3.muscle_groups`: a group's input is its elements'
        common excitation) as inputs; ``select``: element or group names (default: all)."""
        names = self.model.muscle_names
        keys = (list(group_members(names)) if grouped else list(names)) if select is None else select
        cols = []
        for key in keys:
            idx = element_indices(key, names) if grouped else ([names.index(key)] if key in names else None)
            if idx is None:
                hint = "" if grouped else " (excitations take element names)"
                raise LinearizeError(f"--inputs: {unknown_muscle(key, names)}{hint}")
            cols.append(idx)
        return selection_inputs(keys, cols, N_MUS)

    def output_matrices(self, x0, spec: str = "q,qdot") -> tuple[np.ndarray, np.ndarray, tuple, list]:
        """(C, y0, output names, notes) of the outputs in ``spec`` (:func:`parse_outputs`)."""
        rows, y0, names, notes = [], [], [], []
        x0 = np.asarray(x0, float)
        kinematic = None
        for kind, dof in parse_outputs(self.model.dof_names, spec):
            if kind in ("q", "qdot"):
                offset = IQ if kind == "q" else IQD
                for j in (range(N_DOF) if dof is None else (dof,)):
                    rows.append(np.eye(1, N_STATES, offset + j)[0])
                    y0.append(x0[offset + j])
                    names.append(f"{kind}_{self.model.dof_names[j]}")
                continue
            if kinematic is None:
                kinematic = self._kinematic_jacobian(x0)
                notes.append(kinematic_note())
            value, jac = kinematic
            start = 0 if kind == "th_angles" else 3
            for r, name in zip(range(start, start + 3), TH_NAMES if kind == "th_angles" else HAND_NAMES):
                row = np.zeros(N_STATES)
                row[IQ:IQD] = jac[r]
                rows.append(row)
                y0.append(value[r])
                names.append(name)
        return np.array(rows), np.array(y0), tuple(names), notes

    def _kinematic_jacobian(self, x0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(th_angles + hand_position (6,), their q-Jacobian (6x11) by central differences)."""
        W = new_plant_work(self.model.arrays)

        def outputs_at(q):
            x = x0.copy()
            x[IQ:IQD] = q
            evaluate(self.model.arrays, x, np.zeros(N_STATES), x[IA:].copy(), np.zeros(N_LOADS), W)
            compute_outputs(self.model.arrays, W)
            return np.concatenate([W.out.th_angles, W.out.hand_position])

        q0 = x0[IQ:IQD].copy()
        return outputs_at(q0), central_jacobian(outputs_at, q0, OUTPUT_FD_STEP_RAD)


__all__ = ["IA", "IQ", "IQD", "IS", "Das3Linear"]
