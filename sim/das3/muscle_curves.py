"""Characteristic curves of one muscle element under the model's own contraction and activation kernels
(whichever ``ModelConfig.muscle_model`` selects), for comparing muscle models. Offline (allocates).

- Isometric force-length: the tendon force at rest (sdot = 0) for a muscle-tendon length L, from the
  rest-length solve g(L, s, 0, a) = 0 (``sim.das3.kernels.muscles.solve_rest_lengths``), at a = 0 and a = 1.
- Force-velocity: the tendon force at optimal fibre length and a = 1 while the fibre moves at a given
  velocity: g(L, s, sdot, 1) = 0 solved for L at s = cos(alpha_0), i.e. F = (a fl fv + FPE) cos(alpha)
  + damping, read back from the kernel.
- Activation: a(t) for an excitation step 0 -> 1 -> 0, integrated exactly per step (da/dt is affine in a
  between switches: a_{n+1} = u + (a_n - u) exp(-(c1 u + c2) h)).
"""
from __future__ import annotations

import math

import numpy as np

from sim.das3.kernels.muscles import activation_gain, contraction, solve_rest_lengths
from sim.das3.model import MUS_FMAX, MUS_LCEOPT, MUS_PENN_B, MUS_SEESLACK, N_MUS, Das3Model


def rest_force_length(model: Das3Model, muscle: int, lengths_m: np.ndarray, activation: float) -> np.ndarray:
    """Tendon force (N) at rest for each muscle-tendon length (m); NaN where no rest state exists."""
    A = model.arrays
    P = A.mus[muscle]
    out = np.full(len(lengths_m), np.nan)
    L, a, s = np.zeros(N_MUS), np.full(N_MUS, activation), np.ones(N_MUS)
    for k, length in enumerate(lengths_m):
        L[:] = length
        s[:] = max((length - P[MUS_SEESLACK]) / P[MUS_LCEOPT], 0.2)
        solve_rest_lengths(A, L, a, s, 0.05, 1e-12, 200)
        residual = contraction(P, length, s[muscle], 0.0, activation)
        if abs(residual[0]) < 1e-9:
            out[k] = P[MUS_FMAX] * residual[4]
    return out


def force_velocity(model: Das3Model, muscle: int, velocities: np.ndarray) -> np.ndarray:
    """Tendon force (N) at optimal fibre length and a = 1 for fibre velocities in L_CEopt/s (> 0
    lengthening): g = 0 solved for the tendon stretch by bisection (g rises with L)."""
    P = model.arrays.mus[muscle]
    s = math.sqrt(max(1.0 - P[MUS_PENN_B] ** 2, 1e-12))          # fibre at optimal length
    cosp = s                                                      # lce = 1
    out = np.empty(len(velocities))
    for k, v in enumerate(velocities):
        sd = v / cosp
        lo, hi = s * P[MUS_LCEOPT], s * P[MUS_LCEOPT] + 2.0 * P[MUS_SEESLACK]
        for _ in range(200):
            mid = 0.5 * (lo + hi)
            if contraction(P, mid, s, sd, 1.0)[0] < 0.0:
                lo = mid
            else:
                hi = mid
        out[k] = P[MUS_FMAX] * contraction(P, 0.5 * (lo + hi), s, sd, 1.0)[4]
    return out


def activation_step_response(model: Das3Model, muscle: int, t_on_s: float, t_off_s: float, t_end_s: float,
                             h: float = 1e-4) -> tuple[np.ndarray, np.ndarray]:
    """(t, a) for u = 1 on [t_on, t_off), 0 elsewhere, from a = 0."""
    P = model.arrays.mus[muscle]
    t = np.arange(0.0, t_end_s + h / 2, h)
    a = np.zeros_like(t)
    for n in range(1, len(t)):
        u = 1.0 if t_on_s <= t[n - 1] < t_off_s else 0.0
        c1, c2 = activation_gain(P, u, a[n - 1])
        a[n] = u + (a[n - 1] - u) * math.exp(-(c1 * u + c2) * h)
    return t, a
