"""The DAS3 model linearised at an equilibrium, from the exact Jacobians of its implicit form.

The plant is f(x, x', u) = 0 (:mod:`sim.das3.dynamics`, x = [q | qdot | s | a], 298 states, u the 138 excitations).
At an equilibrium (x0, u0) with f(x0, 0, u0) = 0, df/dx' = blockdiag(-I, -M, diag(dg/ds'), I) is regular (M the
mass matrix; dg/ds' < 0 through the contraction damping), so the implicit function theorem gives x' = F(x, u) near it
with

    A = dF/dx = -(df/dx')^-1 df/dx,      B = dF/du = -(df/dx')^-1 df/du

(the same exact pieces as the plant's Rosenbrock step, Chadwick et al. 2014 eq. 8, and the reference solver's
Jacobian, :mod:`sim.das3.reference`). Outputs y = C x: joint angles and velocities are rows of the identity; the
thoracohumeral angles and the hand position depend on q alone and are differentiated by central differences of the
plant's own output kernel with step :data:`OUTPUT_FD_STEP_RAD` (the model has no exact Jacobian of them).

An operating point held by inputs v (excitations, groups or, in :mod:`hil.linearize`, stimulation channel levels) is
found by :func:`hold_posture`: Levenberg-Marquardt steps on v within bounds, each posture the model's own rest
solution (:func:`sim.das3.equilibrium.solve_equilibrium`) and each step's sensitivity the equilibrium's exact one,
dx = -A^-1 B dv.

Not linearised: the stretch reflex of a spastic element (delayed, thresholded; zero below its threshold, so exact
at rest); the activation law's rise/fall switch of the Thelen 2003 option (the rise branch is taken at u = a).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from scipy.optimize import lsq_linear

from sim.das3.dynamics import jacobians, residual
from sim.das3.equilibrium import EquilibriumError, solve_equilibrium
from sim.das3.kernels.outputs import compute_outputs
from sim.das3.kernels.step import IA, IQ, IQD, IS, evaluate, new_plant_work
from sim.das3.layout import MUS_EXCITATION_GATE, N_DOF, N_LOADS, N_MUS, N_STATES, Das3Model
from sim.das3.muscle_groups import element_indices, group_members, unknown_muscle
from sim.errors import UserInputError

EQUILIBRIUM_TOL = 1e-6
"""Largest |f(x0, 0, u0)| accepted at an operating point (N m, Fmax-normalised contraction, 1/s): a *proposal*,
1e-6 of the unit in each, far above the rest solver's 1e-10 RMS and far below any effect on A, B."""
OUTPUT_FD_STEP_RAD = 1e-6
"""Central-difference step in q for outputs without an exact Jacobian: truncation ~ h^2 |y'''| ~ 1e-12, round-off
~ eps / h ~ 1e-10 (a *proposal* balancing the two)."""
POSTURE_TOL_RAD = 1e-8
OUTPUT_KINDS = ("q", "qdot", "th_angles", "hand_position")
TH_NAMES = ("th_plane_of_elevation", "th_elevation", "th_axial_rotation")
HAND_NAMES = ("hand_x", "hand_y", "hand_z")


class LinearizeError(UserInputError, ValueError):
    """An operating point, input or output selection the model cannot be linearised at or for."""


@dataclass
class LinearModel:
    """x' = A (x - x0) + B (v - v0), y - y0 = C (x - x0) + D (v - v0) (SI units, rad; v in ``input_unit``)."""

    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    D: np.ndarray
    x0: np.ndarray
    u0: np.ndarray                 # the operating inputs v0
    y0: np.ndarray
    state_names: tuple[str, ...]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    input_unit: str
    excitation0: np.ndarray        # (138,) the operating excitations
    residual_max: float            # max |f(x0, 0, excitation0)|
    residual_rms: float
    notes: list[str] = field(default_factory=list)


def state_names(model: Das3Model) -> tuple[str, ...]:
    d, m = model.dof_names, model.muscle_names
    return (*(f"q_{n}" for n in d), *(f"qdot_{n}" for n in d), *(f"s_{n}" for n in m), *(f"a_{n}" for n in m))


def checked_state(x, what: str) -> np.ndarray:
    """A 298-value finite state, else :class:`LinearizeError` naming ``what``."""
    arr = np.asarray(x, np.float64).reshape(-1)
    if arr.shape != (N_STATES,):
        raise LinearizeError(f"{what}: a DAS3 state has {N_STATES} values, got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise LinearizeError(f"{what}: the state contains NaN or infinite values")
    return arr


def gate(model: Das3Model) -> np.ndarray:
    """The plant applies gate * clip(u, 0, 1) (a denervated element: gate 0)."""
    return np.asarray(model.arrays.mus[:, MUS_EXCITATION_GATE], np.float64)


def operating_residual(model: Das3Model, x0, excitation, loads=None) -> np.ndarray:
    """f(x0, 0, gate * u) (298,): zero at an equilibrium."""
    return residual(model, x0, np.zeros(N_STATES), gate(model) * np.asarray(excitation, float), loads)


def state_matrices(model: Das3Model, x0, excitation, loads=None) -> tuple[np.ndarray, np.ndarray]:
    """(A (298x298), B (298x138)) at (x0, x' = 0, u): B per commanded excitation (the gate applied)."""
    _, dfdx, dfdxd, dfdu = jacobians(model, x0, np.zeros(N_STATES), gate(model) * np.asarray(excitation, float),
                                     loads)
    A = -np.linalg.solve(dfdxd, dfdx)
    B = -np.linalg.solve(dfdxd, dfdu) * gate(model)[None, :]
    return A, B


def _outputs_at(model: Das3Model, q: np.ndarray, x0: np.ndarray, W) -> np.ndarray:
    x = x0.copy()
    x[IQ:IQD] = q
    evaluate(model.arrays, x, np.zeros(N_STATES), x[IA:].copy(), np.zeros(N_LOADS), W)
    compute_outputs(model.arrays, W)
    return np.concatenate([W.out.th_angles, W.out.hand_position])


def parse_outputs(model: Das3Model, spec: str) -> list[tuple[str, int | None]]:
    """'q,qdot' | 'q:ELx,qdot:ELx' | 'th_angles' | 'hand_position' -> [(kind, DOF index or None), ...]."""
    items = []
    for token in (t.strip() for t in spec.split(",")):
        kind, _, dof = token.partition(":")
        if kind not in OUTPUT_KINDS:
            raise LinearizeError(f"--outputs: unknown output {token!r} (one of {', '.join(OUTPUT_KINDS)}, "
                                 "q and qdot optionally ':DOF')")
        if dof and kind not in ("q", "qdot"):
            raise LinearizeError(f"--outputs: {kind} takes no DOF ({token!r})")
        if dof and dof not in model.dof_names:
            raise LinearizeError(f"--outputs: unknown DOF {dof!r} (one of {', '.join(model.dof_names)})")
        items.append((kind, model.dof_names.index(dof) if dof else None))
    return items


def output_matrices(model: Das3Model, x0, spec: str = "q,qdot") -> tuple[np.ndarray, np.ndarray, tuple, list]:
    """(C, y0, output names, notes) of the outputs in ``spec`` (:func:`parse_outputs`)."""
    rows, y0, names, notes = [], [], [], []
    x0 = np.asarray(x0, float)
    kinematic = None
    for kind, dof in parse_outputs(model, spec):
        if kind in ("q", "qdot"):
            offset = IQ if kind == "q" else IQD
            for j in (range(N_DOF) if dof is None else (dof,)):
                row = np.zeros(N_STATES)
                row[offset + j] = 1.0
                rows.append(row)
                y0.append(x0[offset + j])
                names.append(f"{kind}_{model.dof_names[j]}")
            continue
        if kinematic is None:
            kinematic = _kinematic_jacobian(model, x0)
            notes.append(f"th_angles/hand_position rows: central differences in q, step {OUTPUT_FD_STEP_RAD:g} rad "
                         "(no exact Jacobian of these outputs in the model)")
        value, jac = kinematic
        sl = slice(0, 3) if kind == "th_angles" else slice(3, 6)
        for r, name in zip(range(sl.start, sl.stop), TH_NAMES if kind == "th_angles" else HAND_NAMES):
            row = np.zeros(N_STATES)
            row[IQ:IQD] = jac[r]
            rows.append(row)
            y0.append(value[r])
            names.append(name)
    return np.array(rows), np.array(y0), tuple(names), notes


def _kinematic_jacobian(model: Das3Model, x0: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(th_angles + hand_position (6,), their q-Jacobian (6x11) by central differences)."""
    W = new_plant_work(model.arrays)
    q0 = x0[IQ:IQD].copy()
    value = _outputs_at(model, q0, x0, W)
    jac = np.empty((6, N_DOF))
    h = OUTPUT_FD_STEP_RAD
    for j in range(N_DOF):
        dq = np.zeros(N_DOF)
        dq[j] = h
        jac[:, j] = (_outputs_at(model, q0 + dq, x0, W) - _outputs_at(model, q0 - dq, x0, W)) / (2.0 * h)
    return value, jac


# -- inputs -------------------------------------------------------------------------------------------------------
InputMap = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""v -> (excitations u (138,), du/dv (138 x n)): how the design inputs reach the muscles."""


@dataclass(frozen=True)
class Inputs:
    names: tuple[str, ...]
    unit: str
    lower: np.ndarray
    upper: np.ndarray
    excitation: InputMap           # v -> (u, du/dv), the one-sided (increasing) derivative where u is not smooth
    of_excitation: Callable[[np.ndarray], np.ndarray]   # the v that gives an operating excitation (a state file's a)


def excitation_inputs(model: Das3Model, select: list[str] | None = None, grouped: bool = False) -> Inputs:
    """Element excitations (or whole groups, :mod:`sim.das3.muscle_groups`: a group's input is its elements'
    common excitation) as inputs; ``select``: element or group names (default: all)."""
    names = model.muscle_names
    if grouped:
        groups = group_members(names)
        keys = list(groups) if select is None else select
        cols = []
        for key in keys:
            idx = element_indices(key, names)
            if idx is None:
                raise LinearizeError(f"--inputs: {unknown_muscle(key, names)}")
            cols.append(idx)
    else:
        keys = list(names) if select is None else select
        cols = []
        for key in keys:
            if key not in names:
                raise LinearizeError(f"--inputs: {unknown_muscle(key, names)} (excitations take element names)")
            cols.append([names.index(key)])
    S = np.zeros((N_MUS, len(keys)))
    for c, idx in enumerate(cols):
        S[idx, c] = 1.0
    n = len(keys)

    def excitation(v):
        u = S @ v
        return u, np.where(u[:, None] < 1.0, S, 0.0)

    def of_excitation(u):
        return np.array([float(np.mean(u[idx])) for idx in cols])

    return Inputs(tuple(keys), "excitation (0..1)", np.zeros(n), np.ones(n), excitation, of_excitation)


# -- the linear model -------------------------------------------------------------------------------------------------
def linearize(model: Das3Model, x0, inputs: Inputs, v0, outputs: str = "q,qdot", loads=None,
              tol: float = EQUILIBRIUM_TOL) -> LinearModel:
    """The linear model at (x0, v0); raises :class:`LinearizeError` unless x0 is an equilibrium under v0."""
    x0 = checked_state(x0, "operating state")
    v0 = np.asarray(v0, float)
    u0, dudv = inputs.excitation(v0)
    f = operating_residual(model, x0, u0, loads)
    rmax, rrms = float(np.max(np.abs(f))), float(np.sqrt(np.mean(f ** 2)))
    if not rmax <= tol:
        worst = state_names(model)[int(np.argmax(np.abs(f)))].split("_", 1)
        raise LinearizeError(f"the operating point is no equilibrium: max |f(x0, 0, u0)| = {rmax:.3g} "
                             f"(equation of {worst[1]}, {worst[0]} row) > {tol:g}; give a rest state "
                             "('hil model equilibrium --out') or a posture")
    A, Bu = state_matrices(model, x0, u0, loads)
    C, y0, out_names, notes = output_matrices(model, x0, outputs)
    B = Bu @ dudv
    return LinearModel(A=A, B=B, C=C, D=np.zeros((C.shape[0], B.shape[1])), x0=x0, u0=v0, y0=y0,
                       state_names=state_names(model), input_names=inputs.names, output_names=out_names,
                       input_unit=inputs.unit, excitation0=u0, residual_max=rmax, residual_rms=rrms, notes=notes)


def rest_state(model: Das3Model, u, loads=None, x_guess=None) -> np.ndarray:
    """The rest state under excitations u (:func:`sim.das3.equilibrium.solve_equilibrium`)."""
    try:
        return solve_equilibrium(model, gate(model) * np.asarray(u, float), loads, x_guess).x
    except (EquilibriumError, ValueError) as exc:
        raise LinearizeError(f"no rest posture under the operating inputs: {exc}") from None


def parse_posture(model: Das3Model, spec: str) -> dict[int, float]:
    """'ELx=90,GHz=20' (degrees) -> {DOF index: rad}."""
    targets = {}
    for token in (t.strip() for t in spec.split(",") if t.strip()):
        name, eq, value = token.partition("=")
        if not eq or name.strip() not in model.dof_names:
            raise LinearizeError(f"--posture: {token!r} is not DOF=deg with a DOF of {', '.join(model.dof_names)}")
        try:
            deg = float(value)
        except ValueError:
            deg = math.nan
        if not math.isfinite(deg):
            raise LinearizeError(f"--posture: {token!r}: the angle must be a finite number of degrees")
        targets[model.dof_names.index(name.strip())] = math.radians(deg)
    if not targets:
        raise LinearizeError("--posture: name at least one DOF=deg")
    return targets


def hold_posture(model: Das3Model, inputs: Inputs, targets: dict[int, float], loads=None, iterations: int = 40,
                 damping: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """(x0, v0): a rest state whose DOFs ``targets`` hit their angles, held by inputs v within their bounds.

    Each step solves min |S dv - e|^2 + damping^2 |dv|^2 on lower <= v + dv <= upper (``scipy.optimize.lsq_linear``),
    S = dq_targets/dv = -(A^-1 B)[targets] the exact equilibrium sensitivity, e the posture error; halved while the
    rest solution fails or the error grows."""
    dofs = list(targets)
    goal = np.array([targets[j] for j in dofs])
    v = np.zeros(len(inputs.names))
    x = rest_state(model, inputs.excitation(v)[0], loads)
    for _ in range(iterations):
        e = goal - x[IQ + np.array(dofs)]
        if np.max(np.abs(e)) < POSTURE_TOL_RAD:
            return x, v
        u, dudv = inputs.excitation(v)
        A, Bu = state_matrices(model, x, u, loads)
        S = -np.linalg.solve(A, Bu @ dudv)[IQ + np.array(dofs)]
        n = S.shape[1]
        M = np.vstack([S, damping * np.eye(n)])
        rhs = np.concatenate([e, np.zeros(n)])
        dv = lsq_linear(M, rhs, bounds=(inputs.lower - v, inputs.upper - v)).x
        for _ in range(12):
            try:
                x_new = rest_state(model, inputs.excitation(v + dv)[0], loads, x)
            except LinearizeError:
                dv = 0.5 * dv
                continue
            if np.max(np.abs(goal - x_new[IQ + np.array(dofs)])) < np.max(np.abs(e)):
                break
            dv = 0.5 * dv
        else:
            break
        x, v = x_new, v + dv
    e = goal - x[IQ + np.array(dofs)]
    if np.max(np.abs(e)) >= POSTURE_TOL_RAD:
        names = ", ".join(f"{model.dof_names[j]} off by {math.degrees(d):.3g} deg" for j, d in zip(dofs, e))
        raise LinearizeError(f"the inputs ({', '.join(inputs.names[:6])}{'...' if len(inputs.names) > 6 else ''}) "
                             f"cannot hold the posture: {names}")
    return x, v


def activation_states(model: Das3Model, B: np.ndarray) -> list[int]:
    """State indices of the activations the inputs drive (rows of B in the activation block that are not zero)."""
    return [IA + i for i in range(N_MUS) if np.any(B[IA + i] != 0.0)]


def dof_states(dofs) -> list[int]:
    return [IQ + j for j in dofs] + [IQD + j for j in dofs]


__all__ = ["EQUILIBRIUM_TOL", "IA", "IQ", "IQD", "IS", "Inputs", "LinearModel", "LinearizeError",
           "OUTPUT_FD_STEP_RAD", "activation_states", "checked_state", "dof_states", "excitation_inputs", "gate",
           "hold_posture", "linearize", "operating_residual", "output_matrices", "parse_outputs", "parse_posture",
           "rest_state", "state_matrices", "state_names"]
