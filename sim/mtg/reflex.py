"""Spasticity on the reduced MTG arm: each spastic element's stretch reflex driving the MTGs it acts through
(:mod:`sim.mtg.patient`), the law of :mod:`sim.das3.kernels.reflex` with the element's lengthening velocity from
its MTG's coordinate:

    e_m = sum over the rows k of MTG m of share_k G_k max(0, rate_k (-d_m qdot_c)(t - delay_k) - v_th,k),
    u_m <- min(1, u_base,m + e_m).

The coordinates' velocities of the last ``depth`` steps are held in a ring (``MtgWork.rx_ring``), so a delay is a
whole number of steps, round(tau / h), at least one.
"""
from __future__ import annotations

import numpy as np

from sim.jit.kernel import kernel
from sim.mtg.arm import N_COORD


def reflex_delay_steps(delay_s: np.ndarray, step_s: float) -> np.ndarray:
    """Each reflex row's delay in plant steps of ``step_s``: round(tau / h), at least one."""
    return np.maximum(np.rint(np.asarray(delay_s) / step_s), 1).astype(np.int64)


@kernel
def add_reflex(A, W, u):
    """u_m <- min(1, u_base,m + e_m) for every MTG (module docstring), in place."""
    depth = W.rx_ring.shape[1]
    for m in range(u.shape[0]):
        W.rx_excitation[m] = 0.0
    for k in range(A.reflex_mtg.shape[0]):
        m = A.reflex_mtg[k]
        past = W.rx_ring[A.mtg_coord[m], (W.rx_cursor[0] - W.rx_delay[k]) % depth]
        stretch = A.reflex_rate[k] * (-A.mtg_dir[m] * past)
        W.rx_excitation[m] += A.reflex_share[k] * A.reflex_gain[k] * max(0.0, stretch - A.reflex_threshold[k])
    for m in range(u.shape[0]):
        u[m] = min(1.0, W.u_base[m] + W.rx_excitation[m])


@kernel
def record_velocity(W, x):
    """Push the coordinates' velocities of state x into the ring and advance the cursor."""
    col = W.rx_cursor[0]
    for c in range(N_COORD):
        W.rx_ring[c, col] = x[N_COORD + c]
    W.rx_cursor[0] = (col + 1) % W.rx_ring.shape[1]
