"""Reference trajectories of the DAS3 DOFs from recorded motion, for controllers and the training environments.

From coordinates (.mot/.sto) a DOF is the column of its ``das3.osim`` coordinate (``EL_x``) or of its own name
(``ELx``): the OpenSim model's coordinates are this model's angles, same axes, order, sign and unit (each is the
rotation of one CustomJoint of ``das3.osim`` about a body-fixed axis in the chain SC_y, SC_z, SC_x, AC_y, ...: the
three orthogonal hinges at SC, AC and GH of Chadwick et al. 2014, Sect. II-A, with the axes and order of the
release's joint table, ``sim/data/das3_model.json``).

From markers (.trc/.c3d) only the elbow has a simple inverse kinematics: the flexion angle is the angle between
the upper arm (elbow to shoulder marker) and the forearm (elbow to wrist marker) subtracted from pi,

    ELx = pi - arccos( (S - E) . (W - E) / (|S - E| |W - E|) ),

minus ``elbow_offset_rad``: the marker angle of the subject's straight arm (ELx = 0). The lines through the
markers are not the model's segment axes (the release's elbow axis is oblique and the forearm has a carrying
angle), so on the model's own shoulder (GH centre), elbow-centre and wrist points the marker angle is ELx plus
16-18 deg at fixed pronation, the offset moving by up to 11 deg over the pronation range (the wrist point turns
with the radius): calibrate the offset on a static trial at known pronation. The shoulder angles need a full
inverse kinematics of the DAS3 model (OpenSim's IK tool), whose .mot output this module reads.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from sim.das3.kinematics import frames
from sim.das3.layout import DOF_NAMES, HUMERUS_FRAME, RADIUS_FRAME
from sim.das3.model import ModelArrays
from sim.das3.release import opensim_names
from sim.motion.data import Motion, MotionFileError, resample
from sim.motion.files import read_motion

#: Marker names used when none are given: the right arm's shoulder, lateral epicondyle and radial-styloid markers
#: of Vicon's Plug-in Gait marker set (RSHO, RELB, RWRA; Plug-in Gait Reference Guide, upper-body markers).
DEFAULT_ARM_MARKERS = {"shoulder": "RSHO", "elbow": "RELB", "wrist": "RWRA"}


def coordinate_column(motion: Motion, dof: str) -> str:
    """The column of ``motion`` holding DOF ``dof`` (this model's name or its ``das3.osim`` coordinate)."""
    osim = opensim_names()[0]
    if dof not in DOF_NAMES:
        raise MotionFileError(f"{motion.source}: unknown DOF {dof!r}; the DAS3 DOFs are {', '.join(DOF_NAMES)}")
    for name in (osim[dof], dof, f"/jointset/{_joint_of(dof)}/{osim[dof]}/value"):
        if name in motion.names:
            return name
    raise MotionFileError(f"{motion.source}: no column {osim[dof]!r} (or {dof!r}) for DOF {dof}")


def _joint_of(dof: str) -> str:
    """The ``das3.osim`` CustomJoint that DOF ``dof`` rotates (sc1..sc3, ac1..ac3, gh1..gh3, hu, ur)."""
    k = DOF_NAMES.index(dof)
    return ("sc1", "sc2", "sc3", "ac1", "ac2", "ac3", "gh1", "gh2", "gh3", "hu", "ur")[k]


def elbow_flexion(shoulder: np.ndarray, elbow: np.ndarray, wrist: np.ndarray) -> np.ndarray:
    """ELx (rad) from marker positions (n, 3): pi minus the angle at the elbow between upper arm and forearm."""
    a, b = shoulder - elbow, wrist - elbow
    na, nb = np.linalg.norm(a, axis=1), np.linalg.norm(b, axis=1)
    if np.any(na < 1e-6) or np.any(nb < 1e-6):
        raise ValueError("two arm markers coincide")
    return math.pi - np.arccos(np.clip(np.sum(a * b, axis=1) / (na * nb), -1.0, 1.0))


def thoracohumeral_angles(arrays: ModelArrays, q: np.ndarray) -> np.ndarray:
    """Thoracohumeral YZY angles (plane of elevation, elevation, axial rotation; rad) of postures q (n, 11), as
    the plant's outputs define them from R = R_thorax->humerus: atan2(R21, -R01), arccos(R11), atan2(R12, R10)."""
    R = frames(arrays, q)[0][:, HUMERUS_FRAME]
    return np.column_stack([np.arctan2(R[:, 2, 1], -R[:, 0, 1]), np.arccos(np.clip(R[:, 1, 1], -1.0, 1.0)),
                            np.arctan2(R[:, 1, 2], R[:, 1, 0])])


def hand_positions(arrays: ModelArrays, q: np.ndarray) -> np.ndarray:
    """The hand's centre of mass (n, 3; thorax frame, m) in postures q (n, 11), as the plant's output defines it:
    the radius frame's origin plus its orientation times ``hand_com_radius``."""
    R, P = frames(arrays, q)
    return P[:, RADIUS_FRAME] + R[:, RADIUS_FRAME] @ arrays.hand_com_radius


def reference_trajectory(path: str | os.PathLike, period_s: float, dofs=DOF_NAMES,
                         markers: dict | None = None, elbow_offset_rad: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(t, q): times from 0 s at ``period_s`` and the angles (rad) of ``dofs`` (DAS3 DOF names) over the recorded
    motion in ``path``, linearly resampled. Coordinates files give any DOF; marker files only ``("ELx",)``,
    from the shoulder, elbow and wrist markers named in ``markers`` (keys shoulder, elbow, wrist; default
    :data:`DEFAULT_ARM_MARKERS`) minus ``elbow_offset_rad``."""
    dofs = tuple(dofs)
    motion = read_motion(Path(path))
    if not dofs:
        raise MotionFileError(f"{path}: no DOF asked for")
    if motion.markers:
        if dofs != ("ELx",):
            raise MotionFileError(f"{path}: markers give only the elbow flexion (dofs=('ELx',)); for "
                                  f"{', '.join(d for d in dofs if d != 'ELx') or 'these DOFs'} run OpenSim's inverse "
                                  "kinematics with the DAS3 model and give its .mot")
        names = {**DEFAULT_ARM_MARKERS, **(markers or {})}
        missing = [n for n in (names["shoulder"], names["elbow"], names["wrist"]) if n not in motion.names]
        if missing:
            raise MotionFileError(f"{path}: no marker {', '.join(missing)} (markers: "
                                  f"{', '.join(motion.names[:20])}); name them with markers={{...}}")
        try:
            q = elbow_flexion(*(motion.column(names[k]) for k in ("shoulder", "elbow", "wrist"))) - elbow_offset_rad
        except ValueError as exc:
            raise MotionFileError(f"{path}: {exc}") from None
        motion = Motion(motion.source, motion.time, ("ELx",), q[:, None])
    else:
        columns = [motion.names.index(coordinate_column(motion, d)) for d in dofs]
        motion = Motion(motion.source, motion.time, dofs, motion.values[:, columns])
    out = resample(motion, period_s)
    return out.time - out.time[0], out.values
