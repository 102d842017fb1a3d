"""A plant's linear model at an operating point, whatever the plant: the equilibrium check, the inputs, the posture
held by them and the states a reduction keeps, over the plant's linear view (:class:`sim.linear.base.LinearView`;
:func:`linear_view` gives :class:`sim.linear.das3.Das3Linear` or :class:`sim.linear.mtg.MtgLinear`).

An operating point held by inputs v (excitations, groups or, in :mod:`hil.linearize`, stimulation channel levels) is
found by :func:`hold_posture`: Levenberg-Marquardt steps on v within bounds, each posture the plant's own rest
solution and each step's sensitivity the equilibrium's linear one, dx = -A^-1 B dv.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.optimize import lsq_linear

from sim.linear.base import (
    EQUILIBRIUM_TOL,
    POSTURE_TOL_RAD,
    Inputs,
    LinearizeError,
    LinearModel,
    LinearView,
    checked_state,
)
from sim.linear.das3 import Das3Linear
from sim.linear.mtg import MtgLinear

_VIEWS = {"das3": Das3Linear, "mtg": MtgLinear}


def linear_view(model) -> LinearView:
    """The linear view of a DAS3 or MTG model (by its ``kind``)."""
    try:
        return _VIEWS[model.kind](model)
    except KeyError:
        raise LinearizeError(f"no linear model of plant type {model.kind!r} (one of {', '.join(_VIEWS)})") from None


def linearize(model, x0, inputs: Inputs, v0, outputs: str = "q,qdot", loads=None,
              tol: float = EQUILIBRIUM_TOL) -> LinearModel:
    """The linear model at (x0, v0); raises :class:`LinearizeError` unless x0 is an equilibrium under v0."""
    view = linear_view(model)
    x0 = checked_state(x0, view.n_states, "operating state")
    v0 = np.asarray(v0, float)
    u0, dudv = inputs.excitation(v0)
    f = view.residual(x0, u0, loads)
    rmax, rrms = float(np.max(np.abs(f))), float(np.sqrt(np.mean(f ** 2)))
    if not rmax <= tol:
        worst = view.state_names[int(np.argmax(np.abs(f)))].split("_", 1)
        raise LinearizeError(f"the operating point is no equilibrium: max |f(x0, 0, u0)| = {rmax:.3g} "
                             f"(equation of {worst[1]}, {worst[0]} row) > {tol:g}; give {view.rest_hint}")
    A, Bu = view.state_matrices(x0, u0, loads)
    C, y0, out_names, notes = view.output_matrices(x0, outputs)
    fd_error = view.fd_error(x0, A, loads)
    if fd_error is not None:
        notes.append(f"A: Richardson estimate of the central differences' error {fd_error:.1e} of its largest entry")
    B = Bu @ dudv
    return LinearModel(A=A, B=B, C=C, D=np.zeros((C.shape[0], B.shape[1])), x0=x0, u0=v0, y0=y0,
                       state_names=view.state_names, input_names=inputs.names, output_names=out_names,
                       input_unit=inputs.unit, excitation0=u0, residual_max=rmax, residual_rms=rrms, notes=notes)


def excitation_inputs(model, select: list[str] | None = None, grouped: bool = False) -> Inputs:
    """The plant's excitations (DAS3 elements or groups, MTGs) as inputs; ``select``: their names (default: all)."""
    return linear_view(model).excitation_inputs(select, grouped)


def output_matrices(model, x0, spec: str = "q,qdot") -> tuple[np.ndarray, np.ndarray, tuple, list]:
    """(C, y0, output names, notes) of the outputs in ``spec`` ('q,qdot', 'q:ELx', 'th_angles', 'hand_position')."""
    view = linear_view(model)
    return view.output_matrices(checked_state(x0, view.n_states, "state"), spec)


def parse_posture(model, spec: str) -> dict[int, float]:
    """'ELx=90,GHz=20' (degrees) -> {coordinate index: rad} (the plant's ``positions``)."""
    positions = linear_view(model).positions
    targets = {}
    for token in (t.strip() for t in spec.split(",") if t.strip()):
        name, eq, value = token.partition("=")
        if not eq or name.strip() not in positions:
            raise LinearizeError(f"--posture: {token!r} is not DOF=deg with a DOF of {', '.join(positions)}")
        try:
            deg = float(value)
        except ValueError:
            deg = math.nan
        if not -180.0 <= deg <= 180.0:           # false for NaN
            raise LinearizeError(f"--posture: {token!r}: the angle must be a number of degrees from -180 to 180")
        targets[positions[name.strip()]] = math.radians(deg)
    if not targets:
        raise LinearizeError("--posture: name at least one DOF=deg")
    return targets


def hold_posture(model, inputs: Inputs, targets: dict[int, float], loads=None, iterations: int = 40,
                 damping: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """(x0, v0): a rest state whose coordinates ``targets`` hit their angles, held by inputs v within their bounds.

    Each step solves min |S dv - e|^2 + damping^2 |dv|^2 on lower <= v + dv <= upper (``scipy.optimize.lsq_linear``),
    S = dq_targets/dv = -(A^-1 B)[targets] the equilibrium's sensitivity, e the posture error; halved while the
    rest solution fails or the error grows."""
    view = linear_view(model)
    rows = view.iq + np.array(list(targets))
    goal = np.array(list(targets.values()))
    v = np.zeros(len(inputs.names))
    x = view.rest_state(inputs.excitation(v)[0], loads)
    for _ in range(iterations):
        e = goal - x[rows]
        if np.max(np.abs(e)) < POSTURE_TOL_RAD:
            return x, v
        u, dudv = inputs.excitation(v)
        A, Bu = view.state_matrices(x, u, loads)
        S = -np.linalg.solve(A, Bu @ dudv)[rows]
        n = S.shape[1]
        dv = lsq_linear(np.vstack([S, damping * np.eye(n)]), np.concatenate([e, np.zeros(n)]),
                        bounds=(inputs.lower - v, inputs.upper - v)).x
        for _ in range(12):
            try:
                x_new = view.rest_state(inputs.excitation(v + dv)[0], loads, x)
            except LinearizeError:
                dv = 0.5 * dv
                continue
            if np.max(np.abs(goal - x_new[rows])) < np.max(np.abs(e)):
                break
            dv = 0.5 * dv
        else:
            break
        x, v = x_new, v + dv
    e = goal - x[rows]
    if np.max(np.abs(e)) >= POSTURE_TOL_RAD:
        names = ", ".join(f"{view.coordinate_names[j]} off by {math.degrees(d):.3g} deg" for j, d in zip(targets, e))
        raise LinearizeError(f"the inputs ({', '.join(inputs.names[:6])}{'...' if len(inputs.names) > 6 else ''}) "
                             f"cannot hold the posture: {names}")
    return x, v


def dof_states(model, names) -> list[int]:
    """The angle and rate states of the coordinates ``names`` (a posture's names: e.g. 'ELx')."""
    view = linear_view(model)
    for name in names:
        if name not in view.positions:
            raise LinearizeError(f"--reduce: unknown DOF {name!r} (one of {', '.join(view.positions)})")
    js = [view.positions[n] for n in names]
    return [view.iq + j for j in js] + [view.iqd + j for j in js]


def reduced_states(model, names, B: np.ndarray) -> list[int]:
    """The states a reduction to the coordinates ``names`` keeps: their angles and rates, then the states of the
    muscles the inputs drive (DAS3: fibre states and activations; residualising the fibre states too costs about
    20 % of the elbow's frequency response, docs/analyses/linearize.md)."""
    if not names:
        raise LinearizeError("--reduce: name at least one DOF")
    return dof_states(model, names) + linear_view(model).driven_states(B)


__all__ = ["EQUILIBRIUM_TOL", "Inputs", "LinearModel", "LinearizeError", "dof_states", "excitation_inputs",
           "hold_posture", "linear_view", "linearize", "output_matrices", "parse_posture", "reduced_states"]
