"""What every plant's linear model shares: the model's form, the inputs it is taken in, its error and the central
differences used where a plant has no exact Jacobian.

A linear model is x' = A (x - x0) + B (v - v0), y - y0 = C (x - x0) + D (v - v0) at an equilibrium (x0, v0): SI units
and radians, v in the inputs' unit. How a plant's A and B are obtained is the plant's own module
(:mod:`sim.linear.das3`: exact Jacobians; :mod:`sim.linear.mtg`: central differences of its compiled forces).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from sim.errors import UserInputError

EQUILIBRIUM_TOL = 1e-6
"""Largest |residual| accepted at an operating point (the DAS3 implicit residual f(x0, 0, u0) in N m,
Fmax-normalised contraction and 1/s; the MTG arm's x' in rad/s, rad/s^2 and 1/s): a *proposal*, 1e-6 of the unit in
each, far above the rest solvers' tolerances and far below any effect on A, B."""
OUTPUT_FD_STEP_RAD = 1e-6
"""Central-difference step in q for outputs without an exact Jacobian: truncation ~ h^2 |y'''| ~ 1e-12, round-off
~ eps / h ~ 1e-10 (a *proposal* balancing the two)."""
POSTURE_TOL_RAD = 1e-8
"""How close a held posture's angles must come to their targets."""


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
    excitation0: np.ndarray        # the operating excitation of each muscle element (DAS3) or MTG
    residual_max: float            # max |residual(x0, excitation0)|
    residual_rms: float
    notes: list[str] = field(default_factory=list)


InputMap = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""v -> (excitations u (one per muscle element or MTG), du/dv (n_muscles x n)): how the design inputs reach the
muscles."""


@dataclass(frozen=True)
class Inputs:
    names: tuple[str, ...]
    unit: str
    lower: np.ndarray
    upper: np.ndarray
    excitation: InputMap           # v -> (u, du/dv), the one-sided (increasing) derivative where u is not smooth
    of_excitation: Callable[[np.ndarray], np.ndarray]   # the v that gives an operating excitation (a state file's a)


class LinearView(Protocol):
    """What :mod:`sim.linear.operating` needs of a plant (:class:`sim.linear.das3.Das3Linear`,
    :class:`sim.linear.mtg.MtgLinear`). Coordinate j's angle and rate are states ``iq + j`` and ``iqd + j``; the
    activations start at ``ia``."""

    method: str                          # how A and B are obtained (the provenance's "method")
    rest_hint: str                       # how to give this plant an operating point at rest
    iq: int
    iqd: int
    ia: int
    n_states: int
    state_names: tuple[str, ...]         # q_<coordinate>, qdot_<coordinate>, ..., a_<muscle>
    coordinate_names: tuple[str, ...]
    positions: dict[str, int]            # the names a posture or a reduction takes -> coordinate j

    def residual(self, x0, excitation, loads=None) -> np.ndarray:
        """Zero at an equilibrium under the commanded excitations."""

    def state_matrices(self, x0, excitation, loads=None) -> tuple[np.ndarray, np.ndarray]:
        """(A, B per commanded excitation) at (x0, u)."""

    def fd_error(self, x0, A: np.ndarray, loads=None) -> float | None:
        """The estimated relative error of ``A`` (:meth:`state_matrices` at x0) where it is a finite difference;
        None where it is exact."""

    def rest_state(self, excitation, loads=None, x_guess=None) -> np.ndarray:
        """The rest state under the excitations (:class:`LinearizeError` where there is none)."""

    def output_matrices(self, x0, spec: str) -> tuple[np.ndarray, np.ndarray, tuple, list]:
        """(C, y0, output names, notes) of ``spec`` (:func:`parse_outputs`)."""

    def driven_states(self, B: np.ndarray) -> list[int]:
        """The muscle states a reduction keeps for the inputs of B."""

    def excitation_inputs(self, select: list[str] | None = None, grouped: bool = False) -> Inputs:
        """The plant's excitations (or groups) as inputs."""


def checked_state(x, n_states: int, what: str) -> np.ndarray:
    """An ``n_states``-value finite state, else :class:`LinearizeError` naming ``what``."""
    arr = np.asarray(x, np.float64).reshape(-1)
    if arr.shape != (n_states,):
        raise LinearizeError(f"{what}: a state of this model has {n_states} values, got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise LinearizeError(f"{what}: the state contains NaN or infinite values")
    return arr


def central_jacobian(f: Callable[[np.ndarray], np.ndarray], x0: np.ndarray, h: float) -> np.ndarray:
    """dF/dx at x0 by central differences (f(x0 + h e_j) - f(x0 - h e_j)) / 2h, column j for each x_j."""
    cols = []
    for j in range(x0.size):
        dx = np.zeros(x0.size)
        dx[j] = h
        cols.append((f(x0 + dx) - f(x0 - dx)) / (2.0 * h))
    return np.column_stack(cols)


def selection_inputs(keys, cols, n_muscles: int) -> Inputs:
    """Inputs ``keys``, input c the common excitation of the muscles ``cols[c]`` (0..1; du/dv zero where u >= 1)."""
    S = np.zeros((n_muscles, len(keys)))
    for c, idx in enumerate(cols):
        S[idx, c] = 1.0

    def excitation(v):
        u = S @ v
        return u, np.where(u[:, None] < 1.0, S, 0.0)

    def of_excitation(u):
        return np.array([float(np.mean(u[idx])) for idx in cols])

    n = len(keys)
    return Inputs(tuple(keys), "excitation (0..1)", np.zeros(n), np.ones(n), excitation, of_excitation)


OUTPUT_KINDS = ("q", "qdot", "th_angles", "hand_position")
TH_NAMES = ("th_plane_of_elevation", "th_elevation", "th_axial_rotation")
HAND_NAMES = ("hand_x", "hand_y", "hand_z")


def parse_outputs(dof_names, spec: str) -> list[tuple[str, int | None]]:
    """'q,qdot' | 'q:ELx,qdot:ELx' | 'th_angles' | 'hand_position' -> [(kind, DOF index or None), ...] (the
    DOFs the sensor frame reports, ``dof_names``)."""
    items = []
    for token in (t.strip() for t in spec.split(",")):
        kind, _, dof = token.partition(":")
        if kind not in OUTPUT_KINDS:
            raise LinearizeError(f"--outputs: unknown output {token!r} (one of {', '.join(OUTPUT_KINDS)}, "
                                 "q and qdot optionally ':DOF')")
        if dof and kind not in ("q", "qdot"):
            raise LinearizeError(f"--outputs: {kind} takes no DOF ({token!r})")
        if dof and dof not in dof_names:
            raise LinearizeError(f"--outputs: unknown DOF {dof!r} (one of {', '.join(dof_names)})")
        items.append((kind, dof_names.index(dof) if dof else None))
    return items


def kinematic_note() -> str:
    return (f"th_angles/hand_position rows: central differences in q, step {OUTPUT_FD_STEP_RAD:g} rad "
            "(no exact Jacobian of these outputs in the model)")
