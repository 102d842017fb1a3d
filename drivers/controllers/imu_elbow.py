"""Elbow flexion and its rate from the two lab IMUs of the sensor frame (``imu_quat``, ``imu_gyro``; upper arm on
the humerus, forearm on the radius), as a lab computes it from IMUs with known joint axes.

The forearm sensor's rotation relative to the upper arm's is R = E_el(q_el) E_ps(q_ps) (DAS3 chain: flexion about
a_el in the humerus frame, then pronation about a_ps in the ulna frame). Pronation leaves a_ps fixed, so
v = R a_ps = E_el(q_el) a_ps, and q_el is the angle about a_el that turns a_ps into v (Paden-Kahan subproblem 1):
with u', v' the components of a_ps, v normal to a_el, q_el = atan2(a_el . (u' x v'), u' . v'). The rate: the relative
angular velocity in the humerus frame, R w_fore - w_upper = a_el qdot_el + v qdot_ps, solved for qdot_el by least
squares (the two axes are not parallel).
"""
from __future__ import annotations

import math

import numpy as np

from sim.das3.release import joint_axis


def _rotate(q, v) -> np.ndarray:
    """Vector v rotated by unit quaternion q = (w, x, y, z)."""
    w, r = q[0], np.asarray(q[1:4])
    return v + 2.0 * np.cross(r, np.cross(r, v) + w * v)


def _conjugate_product(a, b) -> np.ndarray:
    """conj(a) (x) b: the rotation b relative to a's frame."""
    aw, ax, ay, az = a[0], -a[1], -a[2], -a[3]
    bw, bx, by, bz = b
    return np.array([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw])


class ImuElbow:
    """Elbow flexion (rad) and its rate (rad/s) from a frame's IMU fields, with the DAS3 release's joint axes."""

    def __init__(self) -> None:
        self.a_el, self.a_ps = joint_axis("hu"), joint_axis("ur")

    @staticmethod
    def reads(frame_dtype) -> bool:
        """Frames of ``frame_dtype`` carry the two IMUs this reads (an unknown dtype, None, is given the benefit)."""
        return frame_dtype is None or {"imu_quat", "imu_gyro"} <= set(frame_dtype.names or ())

    def angle_rate(self, frame) -> tuple[float, float]:
        quat, gyro = frame["imu_quat"][0], frame["imu_gyro"][0]
        rel = _conjugate_product(quat[0], quat[1])
        v = _rotate(rel, self.a_ps)
        a = self.a_el
        u_n, v_n = self.a_ps - a * (a @ self.a_ps), v - a * (a @ v)
        angle = math.atan2(float(a @ np.cross(u_n, v_n)), float(u_n @ v_n))
        omega = _rotate(rel, gyro[1]) - gyro[0]
        basis = np.stack([a, v], axis=1)
        rate = float(np.linalg.lstsq(basis, omega, rcond=None)[0][0])
        return angle, rate
