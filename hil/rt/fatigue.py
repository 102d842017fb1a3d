"""FES fatigue per stimulation channel: Ding et al.'s force-fatigue model, averaged over the pulses.

Ding, Wexler & Binder-Macleod (2003), J Electromyogr Kinesiol 13:575-588, force model (time t, pulse i
at t_i, Ca2+-troponin CN, force F):

    dCN/dt = (1/tau_c) sum_i R_i exp(-(t - t_i)/tau_c) - CN/tau_c,  R_i = 1 + (R0 - 1) exp(-(t_i - t_i-1)/tau_c)
    dF/dt  = A CN/(Km + CN) - F / (tau1 + tau2 CN/(Km + CN)),        R0 = Km + 1.04

and fatigue model (the parameters drift with the force and recover with one time constant):

    dA/dt    = -(A - A_rest)/tau_fat       + alpha_A F
    dKm/dt   = -(Km - Km_rest)/tau_fat     + alpha_Km F
    dtau1/dt = -(tau1 - tau1_rest)/tau_fat + alpha_tau1 F

The fatigue time scales (tens of seconds) are far longer than a pulse period, so the loop drives them with
the force averaged over the pulse train. At a steady rate f every pulse adds R tau_c to the integral of
CN, so the mean is exact: CN_bar = tau_c f (1 + (R0 - 1) exp(-1/(f tau_c))); with g = CN_bar/(Km + CN_bar)
the mean force is taken as the force model's rest point F_bar = A g (tau1 + tau2 g) (the ripple's effect
on the mean is neglected; ``tests/hil/test_fatigue.py`` compares with the pulse-resolved model).

Mapping to the stimulation model (:mod:`hil.rt.stimulation`): the parameters are the published quadriceps
set, taken as the force of the fully recruited group; a channel's force is its recruitment r times
F_bar at its pulse rate f_eff, so fatigue grows with both intensity and frequency. The fitness of a
channel, F_bar(f; A, Km, tau1) / F_bar(f; rest values) at the last rate it was stimulated with, scales
its excitation level. ``rate_scale`` multiplies the three alpha coefficients (weaker or stronger
fatigue in a sweep); 1 is the published model.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.jit.kernel import kernel

FATIGUE_MODELS = ("none", "ding2003")


@dataclass(frozen=True)
class DingParameters:
    """SI units. Ding et al. 2003 values as tabulated in Bioelectron Med 2023;9:3, Table 2 ("Ding et al.
    2003 value" column); tau_c and the R0 offset are the force model's fixed values (Ding et al. 2003)."""

    a_rest: float = 3009.0          # N/s (3.009 N/ms; the table prints 3.0009)
    km_rest: float = 0.103          # -
    tau1_rest: float = 0.050957     # s
    tau2: float = 0.100             # s
    tau_c: float = 0.020            # s
    r0_offset: float = 1.04         # R0 = Km + 1.04
    alpha_a: float = -0.4           # 1/s^2 (-4.0e-7 1/ms^2)
    alpha_km: float = 1.9e-5        # 1/(s N) (1.9e-8 1/(ms N); the table's unit label says ms)
    alpha_tau1: float = 2.1e-5      # 1/N
    tau_fat: float = 127.0          # s

    def kernel_array(self, rate_scale: float = 1.0) -> np.ndarray:
        """(10,) in the order :func:`fatigue_tick` reads them."""
        return np.array([self.a_rest, self.km_rest, self.tau1_rest, self.tau2, self.tau_c, self.r0_offset,
                         self.alpha_a * rate_scale, self.alpha_km * rate_scale, self.alpha_tau1 * rate_scale,
                         self.tau_fat])


DING2003 = DingParameters()
STATE_COLUMNS = ("A_N_per_s", "Km", "tau1_s", "last_rate_hz")


@kernel
def mean_force(a, km, tau1, tau2, tau_c, r0_offset, rate_hz):
    """F_bar = A g (tau1 + tau2 g), g = CN_bar/(Km + CN_bar) at pulse rate ``rate_hz`` (module docstring)."""
    if rate_hz <= 0.0:
        return 0.0
    cn = tau_c * rate_hz * (1.0 + (km + r0_offset - 1.0) * math.exp(-1.0 / (rate_hz * tau_c)))
    g = cn / (km + cn)
    return a * g * (tau1 + tau2 * g)


@kernel
def channel_fitness(state, c, p):
    """F_bar with the channel's drifted parameters over F_bar at rest, at its last pulse rate (1 before
    the first pulse)."""
    rate = state[c, 3]
    if rate <= 0.0:
        return 1.0
    rested = mean_force(p[0], p[1], p[2], p[3], p[4], p[5], rate)
    return mean_force(state[c, 0], state[c, 1], state[c, 2], p[3], p[4], p[5], rate) / rested


@kernel
def fatigue_tick(state, p, c, recruitment, rate_hz, dt):
    """Advance channel c's (A, Km, tau1) by dt under force r F_bar(rate): the recovery term exactly
    (exponential), the drive held over the tick; the parameters are kept physical (A >= 0, Km, tau1 > 0)."""
    if rate_hz > 0.0 and recruitment > 0.0:
        state[c, 3] = rate_hz
        force = recruitment * mean_force(state[c, 0], state[c, 1], state[c, 2], p[3], p[4], p[5], rate_hz)
    else:
        force = 0.0
    keep = math.exp(-dt / p[9])
    state[c, 0] = max(0.0, p[0] + (state[c, 0] - p[0]) * keep + p[6] * force * dt)
    state[c, 1] = max(1e-6, p[1] + (state[c, 1] - p[1]) * keep + p[7] * force * dt)
    state[c, 2] = max(1e-6, p[2] + (state[c, 2] - p[2]) * keep + p[8] * force * dt)


def rested_state(n_channels: int, params: DingParameters = DING2003) -> np.ndarray:
    """(n_channels, 4): every channel at its rest parameters, never stimulated."""
    state = np.zeros((n_channels, len(STATE_COLUMNS)))
    state[:, 0], state[:, 1], state[:, 2] = params.a_rest, params.km_rest, params.tau1_rest
    return state
