"""Forward-mode dual numbers for the multibody kernel (exact first derivatives).

A dual scalar is a float64 array of length ``ND``: slot 0 is the value and slot ``slot_q(j) = 1 + j`` the
derivative with respect to q_j (the derivatives with respect to qdot are analytic, ``sim.das3.kernels.multibody``). Dual
3-vectors are (3, ND) arrays and dual rotation matrices (3, 3, ND). All helpers write into a caller-provided
``out`` that must not alias an input; none allocates. Each helper loops over one slot row at a time, which
the compiler vectorises (it does not for the two-index form).

Every helper takes ``n``, the number of leading slots that can be non-zero: a quantity of the chain's frame
c depends only on the first c DOFs, i.e. on slots [0, c + 1). Slots >= n are neither read nor written, so
a quantity must always be written with the same n (or its upper slots must stay zero).
"""
from __future__ import annotations

import math

from numba import njit

from sim.das3.layout import N_DOF
from sim.jit.kernel import kernel

ND = 1 + N_DOF


@njit(cache=True, inline="always")
def slot_q(j):
    return 1 + j


@njit(cache=True, inline="always")
def frame_slots(c):
    """Number of slots that can be non-zero for a quantity fixed in (or moving with) frame c."""
    return c + 1


@kernel
def d_add(a, b, out, n):
    """out <- a + b (vectors)."""
    for i in range(3):
        ai, bi, oi = a[i], b[i], out[i]
        for k in range(n):
            oi[k] = ai[k] + bi[k]


@kernel
def d_sub(a, b, out, n):
    for i in range(3):
        ai, bi, oi = a[i], b[i], out[i]
        for k in range(n):
            oi[k] = ai[k] - bi[k]


@kernel
def d_iadd(out, a, n):
    """out += a (vectors)."""
    for i in range(3):
        ai, oi = a[i], out[i]
        for k in range(n):
            oi[k] += ai[k]


@kernel
def d_iadd_scaled(out, a, c, n):
    """out += c * a for a constant c."""
    for i in range(3):
        ai, oi = a[i], out[i]
        for k in range(n):
            oi[k] += c * ai[k]


@kernel
def d_cross(a, b, out, n):
    """out <- a x b with the product rule."""
    a0, a1, a2 = a[0, 0], a[1, 0], a[2, 0]
    b0, b1, b2 = b[0, 0], b[1, 0], b[2, 0]
    ax, ay, az, bx, by, bz = a[0], a[1], a[2], b[0], b[1], b[2]
    ox, oy, oz = out[0], out[1], out[2]
    for k in range(1, n):
        ox[k] = ay[k] * b2 + a1 * bz[k] - az[k] * b1 - a2 * by[k]
    for k in range(1, n):
        oy[k] = az[k] * b0 + a2 * bx[k] - ax[k] * b2 - a0 * bz[k]
    for k in range(1, n):
        oz[k] = ax[k] * b1 + a0 * by[k] - ay[k] * b0 - a1 * bx[k]
    ox[0] = a1 * b2 - a2 * b1
    oy[0] = a2 * b0 - a0 * b2
    oz[0] = a0 * b1 - a1 * b0


@kernel
def d_dot(a, b, out, n):
    """Dual scalar out <- a . b."""
    ax, ay, az, bx, by, bz = a[0], a[1], a[2], b[0], b[1], b[2]
    a0, a1, a2, b0, b1, b2 = ax[0], ay[0], az[0], bx[0], by[0], bz[0]
    for k in range(1, n):
        out[k] = ax[k] * b0 + a0 * bx[k] + ay[k] * b1 + a1 * by[k] + az[k] * b2 + a2 * bz[k]
    out[0] = a0 * b0 + a1 * b1 + a2 * b2


@kernel
def d_scale(a, s, out, n):
    """Vector out <- a * s for a dual scalar s."""
    s0 = s[0]
    for i in range(3):
        ai, oi = a[i], out[i]
        a0 = ai[0]
        for k in range(1, n):
            oi[k] = ai[k] * s0 + a0 * s[k]
        oi[0] = a0 * s0


@kernel
def d_matvec_const(R, c, out, n):
    """out <- R c for a dual matrix R and a constant vector c."""
    c0, c1, c2 = c[0], c[1], c[2]
    for i in range(3):
        r0, r1, r2, oi = R[i, 0], R[i, 1], R[i, 2], out[i]
        for k in range(n):
            oi[k] = r0[k] * c0 + r1[k] * c1 + r2[k] * c2


@kernel
def rotation_about_axis(axis, angle, rot, drot):
    """Rodrigues: rot = exp([axis]x angle) and drot = d rot / d angle = [axis]x rot (unit axis)."""
    x, y, z = axis[0], axis[1], axis[2]
    c, s = math.cos(angle), math.sin(angle)
    t = 1.0 - c
    rot[0, 0] = t * x * x + c
    rot[0, 1] = t * x * y - s * z
    rot[0, 2] = t * x * z + s * y
    rot[1, 0] = t * x * y + s * z
    rot[1, 1] = t * y * y + c
    rot[1, 2] = t * y * z - s * x
    rot[2, 0] = t * x * z - s * y
    rot[2, 1] = t * y * z + s * x
    rot[2, 2] = t * z * z + c
    for j in range(3):
        r0, r1, r2 = rot[0, j], rot[1, j], rot[2, j]
        drot[0, j] = y * r2 - z * r1
        drot[1, j] = z * r0 - x * r2
        drot[2, j] = x * r1 - y * r0


@kernel
def d_sqrt(a, out, n):
    """Dual scalar square root (a > 0)."""
    r = math.sqrt(a[0])
    inv = 0.5 / r
    for k in range(1, n):
        out[k] = a[k] * inv
    out[0] = r


# Slot-wise helpers: one slot of a dual quantity as a 3-tuple, for kernels that run every operation of a
# step in one pass over the slots (the operations are slot-wise independent), which saves a call and a
# pass over memory per operation. A tangent slot is the product rule a_k * b_0 + a_0 * b_k, summed in the
# order of the array helpers above (d_cross, d_dot).


@kernel
def slot3(X, k):
    """Slot k of a dual 3-vector X (3, ND) as a tuple."""
    return (X[0, k], X[1, k], X[2, k])


@kernel
def put3(X, k, v):
    X[0, k], X[1, k], X[2, k] = v[0], v[1], v[2]


@kernel
def rot_slot(R, k, c):
    """Slot k of R c for a dual matrix R (3, 3, ND) and a constant vector c."""
    return (R[0, 0, k] * c[0] + R[0, 1, k] * c[1] + R[0, 2, k] * c[2],
            R[1, 0, k] * c[0] + R[1, 1, k] * c[1] + R[1, 2, k] * c[2],
            R[2, 0, k] * c[0] + R[2, 1, k] * c[1] + R[2, 2, k] * c[2])


@kernel
def cross_tangent(ak, a0, bk, b0):
    """Derivative slot of a x b by the product rule, a_k x b_0 + a_0 x b_k (summed as in :func:`d_cross`)."""
    return (ak[1] * b0[2] + a0[1] * bk[2] - ak[2] * b0[1] - a0[2] * bk[1],
            ak[2] * b0[0] + a0[2] * bk[0] - ak[0] * b0[2] - a0[0] * bk[2],
            ak[0] * b0[1] + a0[0] * bk[1] - ak[1] * b0[0] - a0[1] * bk[0])


@kernel
def add3(a, b):
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2])


@kernel
def cross3(a, b):
    """a x b for 3-tuples (values)."""
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


@kernel
def vec3(v):
    return (v[0], v[1], v[2])


@kernel
def scaled3(a, c):
    return (c * a[0], c * a[1], c * a[2])


@kernel
def rot_t_value(R, v0):
    """Value of R^T v (R dual (3, 3, ND), v a 3-tuple)."""
    return (R[0, 0, 0] * v0[0] + R[1, 0, 0] * v0[1] + R[2, 0, 0] * v0[2],
            R[0, 1, 0] * v0[0] + R[1, 1, 0] * v0[1] + R[2, 1, 0] * v0[2],
            R[0, 2, 0] * v0[0] + R[1, 2, 0] * v0[1] + R[2, 2, 0] * v0[2])


@kernel
def rot_t_tangent(R, k, v0, vk):
    """Derivative slot k of R^T v by the product rule (R_k^T v_0 + R_0^T v_k)."""
    return (R[0, 0, k] * v0[0] + R[1, 0, k] * v0[1] + R[2, 0, k] * v0[2]
            + R[0, 0, 0] * vk[0] + R[1, 0, 0] * vk[1] + R[2, 0, 0] * vk[2],
            R[0, 1, k] * v0[0] + R[1, 1, k] * v0[1] + R[2, 1, k] * v0[2]
            + R[0, 1, 0] * vk[0] + R[1, 1, 0] * vk[1] + R[2, 1, 0] * vk[2],
            R[0, 2, k] * v0[0] + R[1, 2, k] * v0[1] + R[2, 2, k] * v0[2]
            + R[0, 2, 0] * vk[0] + R[1, 2, 0] * vk[1] + R[2, 2, 0] * vk[2])


@kernel
def rot_tangent(R, k, v0, vk):
    """Derivative slot k of R v by the product rule (R_k v_0 + R_0 v_k)."""
    return (R[0, 0, k] * v0[0] + R[0, 1, k] * v0[1] + R[0, 2, k] * v0[2]
            + R[0, 0, 0] * vk[0] + R[0, 1, 0] * vk[1] + R[0, 2, 0] * vk[2],
            R[1, 0, k] * v0[0] + R[1, 1, k] * v0[1] + R[1, 2, k] * v0[2]
            + R[1, 0, 0] * vk[0] + R[1, 1, 0] * vk[1] + R[1, 2, 0] * vk[2],
            R[2, 0, k] * v0[0] + R[2, 1, k] * v0[1] + R[2, 2, k] * v0[2]
            + R[2, 0, 0] * vk[0] + R[2, 1, 0] * vk[1] + R[2, 2, 0] * vk[2])


@kernel
def matvec3(M, v):
    """M v for a 3x3 matrix M (values) and a 3-tuple v."""
    return (M[0, 0] * v[0] + M[0, 1] * v[1] + M[0, 2] * v[2], M[1, 0] * v[0] + M[1, 1] * v[1] + M[1, 2] * v[2],
            M[2, 0] * v[0] + M[2, 1] * v[1] + M[2, 2] * v[2])
