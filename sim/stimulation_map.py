"""The stimulation map's last step, from channel levels to muscle excitations, written once for the real-time
tick (:mod:`hil.rt.stimulation`) and the channel optimisation (:mod:`sim.analysis.channel_opt`):

    u_k = clip(max_c G_ck l_c, 0, 1)

with l_c the level of channel c (recruitment x force-frequency factor, after any delay and fatigue) and G_ck
in [0, 1] the gain of channel c on muscle element k. The max over channels (not a sum): two electrodes over
one muscle recruit overlapping motor units.

Spill-over: the current of channel c also reaches neighbouring muscles (insufficient selectivity of surface
electrodes, Koutsou et al. 2016, J NeuroEng Rehabil 13:56), recruited from a higher charge on:

    r_c = s(x_c),   r^s_c = s(x_c - d_c),   s(x) = 3 x^2 - 2 x^3 on x clipped to [0, 1]
    u_k = clip(max_c max(G_ck l_c, S_ck l^s_c), 0, 1)

with x_c = (Q_c - Q_th) / (Q_sat - Q_th) the channel's charge fraction, d_c = (Q_spill - Q_th) / (Q_sat - Q_th)
>= 0 its spill onset, S_ck the spill gains and l^s_c = r^s_c times the channel's force-frequency factor, delay
and fitness. The analyses, which know levels and not charges, take the force-frequency factor 1: x = s^-1(l).
"""
from __future__ import annotations

import math

from numba import njit

from sim.jit.kernel import kernel


@kernel
def raise_to_level(gains, c, level, out):
    """out_k <- max(out_k, G_ck level) over the muscle elements (the max over channels)."""
    if level <= 0.0:
        return
    for k in range(gains.shape[1]):
        v = gains[c, k] * level
        if v > out[k]:
            out[k] = v


@kernel
def recruit(x):
    """s(x) of the module docstring: 0 below 0, 3 x^2 - 2 x^3, 1 above 1 (C1-continuous)."""
    x = min(1.0, max(0.0, x))
    return x * x * (3.0 - 2.0 * x)


@kernel
def unrecruit(level):
    """x in [0, 1] with s(x) = level (level clipped to [0, 1]): the inverse of the cubic's monotone branch."""
    r = min(1.0, max(0.0, level))
    return 0.5 - math.sin(math.asin(1.0 - 2.0 * r) / 3.0)


@kernel
def clip_unit(out):
    for k in range(out.shape[0]):
        out[k] = min(1.0, max(0.0, out[k]))


@njit(cache=True, nogil=True)
def excitations_of_levels(gains, levels, out):
    """u (into ``out``, one per muscle element) of channel ``levels`` through ``gains`` (n_channels, n_muscles);
    callable from Python."""
    out[:] = 0.0
    for c in range(gains.shape[0]):
        raise_to_level(gains, c, levels[c], out)
    clip_unit(out)
    return out


@njit(cache=True, nogil=True)
def excitations_with_spill(gains, levels, spill_gains, spill_onsets, out):
    """:func:`excitations_of_levels` with each channel's spill-over (module docstring) at force-frequency
    factor 1: l^s_c = s(s^-1(l_c) - d_c); a channel with d_c = inf spills nothing. Callable from Python."""
    out[:] = 0.0
    for c in range(gains.shape[0]):
        raise_to_level(gains, c, levels[c], out)
        raise_to_level(spill_gains, c, recruit(unrecruit(levels[c]) - spill_onsets[c]), out)
    clip_unit(out)
    return out
