"""The stimulation map's last step, from channel levels to muscle excitations, written once for the real-time
tick (:mod:`hil.rt.stimulation`) and the channel optimisation (:mod:`sim.analysis.channel_opt`):

    u_k = clip(max_c G_ck l_c, 0, 1)

with l_c the level of channel c (recruitment x force-frequency factor, after any delay and fatigue) and G_ck
in [0, 1] the gain of channel c on muscle element k. The max over channels (not a sum): two electrodes over
one muscle recruit overlapping motor units.
"""
from __future__ import annotations

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
