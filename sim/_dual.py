"""Forward-mode dual numbers for the multibody kernel (exact first derivatives).

A dual scalar is a float64 array of length ``ND``: slot 0 is the value, slot ``slot_q(j) = 1 + 2 j`` the
derivative with respect to q_j and ``slot_qd(j) = 2 + 2 j`` the derivative with respect to qdot_j. Dual
3-vectors are (3, ND) arrays and dual rotation matrices (3, 3, ND). All helpers write into a caller-provided
``out`` that must not alias an input; none allocates.

Every helper takes ``n``, the number of leading slots that can be non-zero: a quantity of the chain's frame
c depends only on the first c DOFs, i.e. on slots [0, 2c + 1). Slots >= n are neither read nor written, so
a quantity must always be written with the same n (or its upper slots must stay zero).
"""
from __future__ import annotations

import math

from numba import njit

from sim._jit import kernel
from sim.model import N_DOF

ND = 1 + 2 * N_DOF


@njit(cache=True, inline="always")
def slot_q(j):
    return 1 + 2 * j


@njit(cache=True, inline="always")
def slot_qd(j):
    return 2 + 2 * j


@njit(cache=True, inline="always")
def frame_slots(c):
    """Number of slots that can be non-zero for a quantity fixed in (or moving with) frame c."""
    return 2 * c + 1


@kernel
def d_add(a, b, out, n):
    """out <- a + b (vectors)."""
    for i in range(3):
        for k in range(n):
            out[i, k] = a[i, k] + b[i, k]


@kernel
def d_sub(a, b, out, n):
    for i in range(3):
        for k in range(n):
            out[i, k] = a[i, k] - b[i, k]


@kernel
def d_iadd(out, a, n):
    """out += a (vectors)."""
    for i in range(3):
        for k in range(n):
            out[i, k] += a[i, k]


@kernel
def d_iadd_scaled(out, a, c, n):
    """out += c * a for a constant c."""
    for i in range(3):
        for k in range(n):
            out[i, k] += c * a[i, k]


@kernel
def d_cross(a, b, out, n):
    """out <- a x b with the product rule."""
    a0, a1, a2 = a[0, 0], a[1, 0], a[2, 0]
    b0, b1, b2 = b[0, 0], b[1, 0], b[2, 0]
    for k in range(1, n):
        out[0, k] = a[1, k] * b2 + a1 * b[2, k] - a[2, k] * b1 - a2 * b[1, k]
        out[1, k] = a[2, k] * b0 + a2 * b[0, k] - a[0, k] * b2 - a0 * b[2, k]
        out[2, k] = a[0, k] * b1 + a0 * b[1, k] - a[1, k] * b0 - a1 * b[0, k]
    out[0, 0] = a1 * b2 - a2 * b1
    out[1, 0] = a2 * b0 - a0 * b2
    out[2, 0] = a0 * b1 - a1 * b0


@kernel
def d_dot(a, b, out, n):
    """Dual scalar out <- a . b."""
    for k in range(1, n):
        out[k] = (a[0, k] * b[0, 0] + a[0, 0] * b[0, k] + a[1, k] * b[1, 0] + a[1, 0] * b[1, k]
                  + a[2, k] * b[2, 0] + a[2, 0] * b[2, k])
    out[0] = a[0, 0] * b[0, 0] + a[1, 0] * b[1, 0] + a[2, 0] * b[2, 0]


@kernel
def d_scale(a, s, out, n):
    """Vector out <- a * s for a dual scalar s."""
    s0 = s[0]
    for i in range(3):
        ai = a[i, 0]
        for k in range(1, n):
            out[i, k] = a[i, k] * s0 + ai * s[k]
        out[i, 0] = ai * s0


@kernel
def d_scale_var(a, value, slot, out, n):
    """Vector out <- a * v where v is an independent variable (value, unit derivative in ``slot``)."""
    for i in range(3):
        for k in range(n):
            out[i, k] = a[i, k] * value
        out[i, slot] += a[i, 0]


@kernel
def d_matvec_const(R, c, out, n):
    """out <- R c for a dual matrix R and a constant vector c."""
    for i in range(3):
        for k in range(n):
            out[i, k] = R[i, 0, k] * c[0] + R[i, 1, k] * c[1] + R[i, 2, k] * c[2]


@kernel
def d_matvec(R, v, out, n):
    """out <- R v, both dual."""
    for i in range(3):
        r0, r1, r2 = R[i, 0, 0], R[i, 1, 0], R[i, 2, 0]
        for k in range(1, n):
            out[i, k] = (R[i, 0, k] * v[0, 0] + R[i, 1, k] * v[1, 0] + R[i, 2, k] * v[2, 0]
                         + r0 * v[0, k] + r1 * v[1, k] + r2 * v[2, k])
        out[i, 0] = r0 * v[0, 0] + r1 * v[1, 0] + r2 * v[2, 0]


@kernel
def d_mattvec(R, v, out, n):
    """out <- R^T v, both dual."""
    for i in range(3):
        r0, r1, r2 = R[0, i, 0], R[1, i, 0], R[2, i, 0]
        for k in range(1, n):
            out[i, k] = (R[0, i, k] * v[0, 0] + R[1, i, k] * v[1, 0] + R[2, i, k] * v[2, 0]
                         + r0 * v[0, k] + r1 * v[1, k] + r2 * v[2, k])
        out[i, 0] = r0 * v[0, 0] + r1 * v[1, 0] + r2 * v[2, 0]


@kernel
def d_constmat_vec(A, v, out, n):
    """out <- A v for a constant 3x3 matrix A."""
    for i in range(3):
        for k in range(n):
            out[i, k] = A[i, 0] * v[0, k] + A[i, 1] * v[1, k] + A[i, 2] * v[2, k]


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
def d_rotate_frame(R_parent, rot, drot, slot, R_child, n):
    """R_child <- R_parent rot(q), where rot depends only on the variable in ``slot`` (d rot = drot)."""
    for i in range(3):
        for j in range(3):
            for k in range(n):
                R_child[i, j, k] = (R_parent[i, 0, k] * rot[0, j] + R_parent[i, 1, k] * rot[1, j]
                                    + R_parent[i, 2, k] * rot[2, j])
            R_child[i, j, slot] += (R_parent[i, 0, 0] * drot[0, j] + R_parent[i, 1, 0] * drot[1, j]
                                    + R_parent[i, 2, 0] * drot[2, j])


@kernel
def d_sqrt(a, out, n):
    """Dual scalar square root (a > 0)."""
    r = math.sqrt(a[0])
    inv = 0.5 / r
    for k in range(1, n):
        out[k] = a[k] * inv
    out[0] = r
