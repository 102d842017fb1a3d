"""The environments' ``render_mode="rgb_array"``: an arm's posture drawn as an RGB image, for videos of a policy
(Gymnasium's ``RecordVideo``, Stable-Baselines3's ``VecVideoRecorder``).

Two views side by side, each :data:`PANEL_PX` pixels square over :data:`SPAN_M` metres of the thorax frame: the
front (x, lateral, to the right; y up) and the side (-z, forward, to the right; y up). Drawn are the thorax
outline (the scapular gliding ellipsoid, :func:`sim.das3.kinematics.thorax_ellipsoid`) and the bones between the
model's landmarks (:func:`sim.das3.kinematics.landmarks`: clavicle SC-AC, scapula AC-TS-AI, humerus GH-EL,
forearm EL-WR, hand WR-HAND), as the live view draws them; the MTG arm's frame carries the eleven DAS3
coordinates of its frozen girdle, so both arms are drawn alike.
"""
from __future__ import annotations

import numpy as np

from sim.das3.kinematics import LANDMARKS, landmarks, thorax_ellipsoid

PANEL_PX = 240
"""Height and width of each view, pixels."""
SPAN_M = 1.4
"""Metres of the thorax frame across a view (a raised or hanging arm reaches about 0.65 m from the GH joint)."""
CENTRE_M = np.array([0.17, -0.03, 0.07])
"""Thorax-frame point (m) at the middle of both views: the GH joint at rest."""
BONES = (("SC", "AC", (200, 160, 40)), ("AC", "TS", (120, 120, 200)), ("TS", "AI", (120, 120, 200)),
         ("AI", "AC", (120, 120, 200)), ("GH", "EL", (40, 110, 220)), ("EL", "WR", (30, 170, 90)),
         ("WR", "HAND", (220, 60, 60)))
"""(from, to, RGB) of each drawn bone."""
THORAX_RGB = (205, 205, 205)
BACKGROUND_RGB = (255, 255, 255)
THICKNESS_PX = 3


def pixel(points_m: np.ndarray, view: int) -> np.ndarray:
    """(row, column) of thorax-frame points (…, 3) in view 0 (front) or 1 (side), image coordinates."""
    horizontal = points_m[..., 0] - CENTRE_M[0] if view == 0 else -(points_m[..., 2] - CENTRE_M[2])
    vertical = points_m[..., 1] - CENTRE_M[1]
    scale = PANEL_PX / SPAN_M
    col = PANEL_PX / 2 + horizontal * scale + view * PANEL_PX
    row = PANEL_PX / 2 - vertical * scale
    return np.stack([row, col], axis=-1)


def arm_picture(arrays, q: np.ndarray, length_scale: float = 1.0) -> np.ndarray:
    """The posture ``q`` (the 11 DAS3 joint angles, rad) of the arm with segment ``arrays``: (PANEL_PX,
    2 PANEL_PX, 3) uint8."""
    image = np.empty((PANEL_PX, 2 * PANEL_PX, 3), np.uint8)
    image[:] = BACKGROUND_RGB
    centre, radii = thorax_ellipsoid(arrays)
    angle = np.linspace(0.0, 2.0 * np.pi, 720)
    points = landmarks(arrays, np.asarray(q, np.float64)[None, :], length_scale)[0]
    where = {name: points[k] for k, name in enumerate(LANDMARKS)}
    for view in (0, 1):
        across = 0 if view == 0 else 2
        outline = np.zeros((angle.size, 3))
        outline[:, across] = centre[across] + radii[across] * np.cos(angle)
        outline[:, 1] = centre[1] + radii[1] * np.sin(angle)
        _stamp(image, pixel(outline, view), THORAX_RGB, view)
        for start, end, rgb in BONES:
            _stamp(image, pixel(_segment(where[start], where[end]), view), rgb, view)
    image[:, PANEL_PX - 1:PANEL_PX + 1] = THORAX_RGB          # the line between the views
    return image


def _segment(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Points along a to b, closer together than a pixel."""
    n = max(2, int(np.linalg.norm(b - a) / SPAN_M * PANEL_PX * 2) + 1)
    return a + np.linspace(0.0, 1.0, n)[:, None] * (b - a)


def _stamp(image: np.ndarray, rows_cols: np.ndarray, rgb, view: int) -> None:
    """Square dots of THICKNESS_PX at the pixels ``rows_cols`` (n, 2) that fall inside ``view``."""
    rc = np.rint(rows_cols).astype(np.int64)
    lo, hi = view * PANEL_PX, (view + 1) * PANEL_PX
    for dr in range(-(THICKNESS_PX // 2), THICKNESS_PX - THICKNESS_PX // 2):
        for dc in range(-(THICKNESS_PX // 2), THICKNESS_PX - THICKNESS_PX // 2):
            r, c = rc[:, 0] + dr, rc[:, 1] + dc
            inside = (r >= 0) & (r < PANEL_PX) & (c >= lo) & (c < hi)
            image[r[inside], c[inside]] = rgb
