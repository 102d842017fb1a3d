"""Where the bones are: 3-D points of the arm from the joint angles, for drawing (not for the real-time step).

The chain is the model's own (spec "Kinematics", :func:`sim.das3.kernels.multibody.multibody_eval`): frame 0 is the
thorax, and after DOF j

    P_(j+1) = P_j + R_j joint_loc_j,    R_(j+1) = R_j exp([joint_axis_j]x q_j)    (Rodrigues),

so the SC joint is P_1, the AC joint P_4 (frame 6 = scapula), the GH centre P_7 (frame 9 = humerus), the
elbow (humeroulnar) centre P_10 and the proximal radioulnar joint P_11 (frame 11 = radius). Points fixed in a
segment are P_f + R_f p: the scapula's TS and AI (the model's scapulothoracic contact points), the wrist
(the release's ``rc`` joint) and the hand's centre of mass (the plant's ``hand_position``). The release has
no acromial angle (AA) and no glenoid centre point, only the glenoid axis (:data:`sim.das3.model.GLENOID_X`):
:func:`glenoid_axis` gives its direction. Vectorised over postures: ``q`` is (11,) or (n, 11).
"""
from __future__ import annotations

import numpy as np

from sim.das3.model import (
    BODY_SEGMENTS,
    CLAVICLE_FRAME,
    N_DOF,
    N_FRAMES,
    RADIUS_FRAME,
    SCAPULA_FRAME,
    ModelArrays,
    joint_location,
)

#: The points of :func:`landmarks`, in order: SC and AC joints, the scapula's TS and AI, GH centre, elbow,
#: proximal radioulnar joint, wrist, hand (centre of mass).
LANDMARKS = ("SC", "AC", "TS", "AI", "GH", "EL", "PRU", "WR", "HAND")


def _rotations(axis: np.ndarray, angle: np.ndarray) -> np.ndarray:
    """exp([k]x a) = I + sin a K + (1 - cos a) K^2 for a unit axis k and n angles: (n, 3, 3)."""
    k = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    s, c = np.sin(angle)[:, None, None], np.cos(angle)[:, None, None]
    return np.eye(3) + s * k + (1.0 - c) * (k @ k)


def frames(arrays: ModelArrays, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Orientation R (n, 12, 3, 3) and origin P (n, 12, 3) of every frame, thorax frame, m."""
    q = np.atleast_2d(np.asarray(q, np.float64))
    n = q.shape[0]
    R = np.empty((n, N_FRAMES, 3, 3))
    P = np.empty((n, N_FRAMES, 3))
    R[:, 0], P[:, 0] = np.eye(3), 0.0
    for j in range(N_DOF):
        P[:, j + 1] = P[:, j] + R[:, j] @ arrays.joint_loc[j]
        R[:, j + 1] = R[:, j] @ _rotations(arrays.joint_axis[j], q[:, j])
    return R, P


def _at(R: np.ndarray, P: np.ndarray, frame: int, point: np.ndarray) -> np.ndarray:
    return P[:, frame] + R[:, frame] @ np.asarray(point, np.float64)


def landmarks(arrays: ModelArrays, q: np.ndarray, length_scale: float = 1.0) -> np.ndarray:
    """The :data:`LANDMARKS` of each posture, thorax frame, m: (n, 9, 3); ``length_scale``: the model's
    (``ModelConfig.length_scale``), for the wrist, which the arrays do not hold."""
    R, P = frames(arrays, q)
    ts, ai = arrays.contact_points
    return np.stack([P[:, 1], P[:, 4], _at(R, P, SCAPULA_FRAME, ts), _at(R, P, SCAPULA_FRAME, ai), P[:, 7],
                     P[:, 10], P[:, 11], _at(R, P, RADIUS_FRAME, wrist(length_scale)),
                     _at(R, P, RADIUS_FRAME, arrays.hand_com_radius)], axis=1)


def wrist(length_scale: float = 1.0) -> np.ndarray:
    """The wrist (the release's ``rc`` joint) in the radius frame, m, of a model of ``length_scale``."""
    rc = joint_location("rc")
    return rc if length_scale == 1.0 else rc * length_scale


SEGMENT_ENDS = (("clavicle", "SC", "AC", 3), ("scapula", "AC", "GH", 6), ("humerus", "GH", "EL", 9),
                ("ulna", "EL", "PRU", 10), ("radius", "PRU", "WR", None))
"""Each bone's length for ``hil model info``: (bone, from, to, the DOF whose joint centre ``to`` is)."""


def segment_sizes(arrays: ModelArrays, length_scale: float = 1.0) -> list[dict]:
    """Each body's mass (kg) and length (m, between the joint centres of :data:`SEGMENT_ENDS`; the hand: wrist to
    its centre of mass), in the order of ``sim.das3.layout.BODY_SEGMENTS``."""
    lengths = [float(np.linalg.norm(arrays.joint_loc[j])) if j is not None
               else float(np.linalg.norm(wrist(length_scale))) for *_, j in SEGMENT_ENDS]
    lengths.append(float(np.linalg.norm(np.asarray(arrays.hand_com_radius) - wrist(length_scale))))
    ends = [f"{a}-{b}" for _, a, b, _ in SEGMENT_ENDS] + ["WR-HAND"]
    return [{"segment": name, "mass_kg": float(mass), "length_m": length, "between": between}
            for name, mass, length, between in zip(BODY_SEGMENTS, arrays.body_mass, lengths, ends)]


def glenoid_axis(arrays: ModelArrays, q: np.ndarray) -> np.ndarray:
    """The glenoid's x axis (humeral-head centre towards the glenoid), thorax frame: (n, 3) unit vectors."""
    R, _ = frames(arrays, q)
    return R[:, SCAPULA_FRAME] @ arrays.glenoid[0]


def conoid_attachments(arrays: ModelArrays, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The conoid ligament's origin on the clavicle and insertion on the scapula (spec "Conoid ligament"),
    thorax frame, m: two (n, 3) arrays."""
    R, P = frames(arrays, q)
    con = np.asarray(arrays.conoid, np.float64)
    return _at(R, P, CLAVICLE_FRAME, con[0:3]), _at(R, P, SCAPULA_FRAME, con[3:6])


def thorax_ellipsoid(arrays: ModelArrays) -> tuple[np.ndarray, np.ndarray]:
    """Centre and semi-axes (m, thorax frame) of the ellipsoid the scapula glides on: the thorax outline."""
    return np.array(arrays.contact[0:3]), np.array(arrays.contact[3:6])
