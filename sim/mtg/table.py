"""A cubic Hermite table kernel: the contracture moment tables of the MTG arm (:mod:`sim.mtg.contracture`)."""
from __future__ import annotations

from sim.jit.kernel import kernel


@kernel
def hermite_table(start, step, n_knots, value, slope, x):
    """(y, dy/dx) of a table of values and slopes at the knots start + k step, k < n_knots, at x: the cubic
    Hermite spline between knots (C1), the end tangents beyond. With t in [0, 1] between knots k and k+1 and
    m = slope step: y = h00 y_k + h10 m_k + h01 y_k+1 + h11 m_k+1, h00 = 2t^3 - 3t^2 + 1, h10 = t^3 - 2t^2 + t,
    h01 = -2t^3 + 3t^2, h11 = t^3 - t^2."""
    last = n_knots - 1
    u = (x - start) / step
    if u <= 0.0:
        return value[0] + slope[0] * (x - start), slope[0]
    if u >= last:
        return value[last] + slope[last] * (x - start - last * step), slope[last]
    k = min(int(u), last - 1)
    t = u - k
    y0, y1, m0, m1 = value[k], value[k + 1], slope[k] * step, slope[k + 1] * step
    t2, t3 = t * t, t * t * t
    y = (2.0 * t3 - 3.0 * t2 + 1.0) * y0 + (t3 - 2.0 * t2 + t) * m0 + (-2.0 * t3 + 3.0 * t2) * y1 + (t3 - t2) * m1
    dy = (6.0 * t2 - 6.0 * t) * y0 + (3.0 * t2 - 4.0 * t + 1.0) * m0 + (-6.0 * t2 + 6.0 * t) * y1 \
        + (3.0 * t2 - 2.0 * t) * m1
    return y, dy / step
