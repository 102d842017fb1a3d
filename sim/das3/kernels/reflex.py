"""Spasticity: a velocity-dependent stretch reflex of the spastic muscle elements (issue 37).

The form of van der Krogt et al. (2016, J NeuroEng Rehabil 13:64): an extra excitation driven by the muscle's
lengthening velocity above a threshold, after a delay,

    e_i(t) = G_i max(0, v_i(t - tau_i) - v_th,i),    u_i <- min(1, u_i + g_i e_i),

with v_i the muscle-tendon unit's lengthening velocity in optimal fibre lengths per second,
v_i = (dL_i/dq . qdot) / Lceopt_i, from the path polynomials' exact gradient at the end of each plant step
(van der Krogt use the fibre velocity; with the DAS3 tendons the two differ during the stretch's first tens of
ms, and the path velocity does not depend on the contraction state of a slack fibre at a = 0). g_i is the
element's excitation gate (a denervated element has no reflex). The excitation then passes the activation
dynamics as any other. Parameters per element in ``ModelArrays.mus`` (MUS_REFLEX_GAIN, _THRESHOLD, _DELAY);
the velocities of the last ``depth`` steps in a ring per spastic element (:class:`ReflexWork`), so the delay is
a whole number of steps, round(tau / h), at least one.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from sim.das3.layout import (
    MUS_EXCITATION_GATE,
    MUS_LCEOPT,
    MUS_REFLEX_DELAY,
    MUS_REFLEX_GAIN,
    MUS_REFLEX_THRESHOLD,
    N_DOF,
    N_MUS,
)
from sim.jit.kernel import kernel


class ReflexWork(NamedTuple):
    """The reflex's per-run state: which elements are spastic, their delays in steps, their past velocities."""

    idx: np.ndarray        # (n,) int: the spastic elements (MUS_REFLEX_GAIN > 0)
    delay: np.ndarray      # (n,) int: tau / h in steps, >= 1
    ring: np.ndarray       # (n, depth): lengthening velocity (Lceopt/s) at the end of each of the last steps
    cursor: np.ndarray     # (1,) int: the ring column the next velocity goes to
    u_base: np.ndarray     # (138,) the held excitation of the steps being taken, before the reflex


def new_reflex_work(A, step_s: float | None) -> ReflexWork:
    """The reflex state of model arrays ``A`` for plant steps of ``step_s`` (None: one-step delays, for
    evaluations that never step)."""
    mus = np.asarray(A.mus)
    idx = np.flatnonzero(mus[:, MUS_REFLEX_GAIN] > 0.0).astype(np.int64)
    seconds = mus[idx, MUS_REFLEX_DELAY]
    delay = np.ones(idx.size, np.int64) if step_s is None else np.maximum(np.rint(seconds / step_s), 1).astype(np.int64)
    depth = int(delay.max()) + 1 if idx.size else 1
    return ReflexWork(idx=idx, delay=delay, ring=np.zeros((idx.size, depth)), cursor=np.zeros(1, np.int64),
                      u_base=np.zeros(N_MUS))


@kernel
def add_reflex(A, R, u):
    """u_i <- min(1, u_base,i + g_i G_i max(0, v_i(t - delay_i) - v_th,i)) for the spastic elements (in place)."""
    depth = R.ring.shape[1]
    for j in range(R.idx.shape[0]):
        i = R.idx[j]
        past = R.ring[j, (R.cursor[0] - R.delay[j]) % depth]
        e = A.mus[i, MUS_REFLEX_GAIN] * max(0.0, past - A.mus[i, MUS_REFLEX_THRESHOLD])
        u[i] = min(1.0, R.u_base[i] + A.mus[i, MUS_EXCITATION_GATE] * e)


@kernel
def record_velocity(A, R, G, x):
    """Push each spastic element's lengthening velocity (dL/dq . qdot / Lceopt; G: the muscles' dL/dq over their
    own DOFs at state x) into the ring and advance the cursor."""
    col = R.cursor[0]
    for j in range(R.idx.shape[0]):
        i = R.idx[j]
        v = 0.0
        for k in range(A.mus_ndof[i]):
            v += G[i, k] * x[N_DOF + A.mus_dofs[i, 0] + k]
        R.ring[j, col] = v / A.mus[i, MUS_LCEOPT]
    R.cursor[0] = (col + 1) % R.ring.shape[1]
