"""A run recording as OpenSim Storage files (``hil export --mot/--sto``), which OpenSim 4 and OpenSim Creator
read with the published DAS3 model (``das3.osim``, Chadwick et al. 2014).

**.mot**: time and the 11 joint angles under the model's coordinate names (``SC_y`` ... ``PS_y``,
``osim_name`` of the release's DOF table). The plant's angles are the coordinates of ``das3.osim`` unchanged:
each DOF is the rotation of one CustomJoint about a body-fixed axis, chained thorax -> clavicle -> scapula ->
humerus -> ulna -> radius in the order SC_y, SC_z, SC_x, AC_y, AC_z, AC_x, GH_y, GH_z, GH_yy, EL_x, PS_y with
linear transform functions of slope 1 (Chadwick et al. 2014, Sect. II-A: three orthogonal hinges at SC, AC and
GH; axes and order from the release's joint table, from which the plant's kinematics are built), so the export
is a rename; ``inDegrees`` says whether the angles are written in degrees or radians.

**.sto**: per muscle element its excitation (``/forceset/<muscle>``, 0..1, OpenSim's controls naming), and
when recomputed its activation (``/forceset/<muscle>/activation``, OpenSim's state path) and force
(``/forceset/<muscle>|tendon_force``, N; for the reduced arm's MTGs, torque actuators under their own names, the
torque ``/forceset/<mtg>|actuation``, N m, as OpenSim names an actuator's generalized force); the GH joint reaction on the scapula in the scapula frame
(``GH_on_scapula_r_in_scapula_r_fx``/``fy``/``fz``, N, named as OpenSim's JointReaction analysis names its
columns) and the GH stability (paper eq. 9, 1), left out for the reduced MTG arm, which has no GH joint. The recording holds excitations and the GH force; activations
and muscle forces are recomputed by replaying the recording through the same plant
(:func:`hil.recording.replay.replay_recording`), which must reproduce every recorded frame bit for bit.
"""
from __future__ import annotations

import numpy as np

from hil.recording.hilrec import RecordingError, RecordingReader
from hil.recording.replay import replay_recording
from sim.das3.release import opensim_names
from sim.output_file import output_file

UNITS_LINE = "Units are S.I. units (second, meters, Newtons, ...)"
"""The units sentence OpenSim's own Storage writer puts in the header of every file it writes."""


def _write(path: str, name: str, labels: list[str], table: np.ndarray, degrees: bool) -> int:
    """OpenSim Storage version 1: name line, nRows, nColumns, inDegrees, the units line, endheader, labels, rows."""
    with output_file(path, "w", encoding="utf-8") as fh:
        fh.write(f"{name}\nversion=1\nnRows={table.shape[0]}\nnColumns={len(labels)}\n"
                 f"inDegrees={'yes' if degrees else 'no'}\n{UNITS_LINE}\nendheader\n")
        fh.write("\t".join(labels) + "\n")
        np.savetxt(fh, table, delimiter="\t", fmt="%.17g")
    return table.shape[0]


def coordinate_names(dof_names) -> list[str]:
    """The ``das3.osim`` coordinate of each DOF name of a recording."""
    osim = opensim_names()[0]
    missing = [d for d in dof_names if d not in osim]
    if missing:
        raise RecordingError(f"the recording's DOFs {missing} have no DAS3 OpenSim coordinate")
    return [osim[d] for d in dof_names]


def recorded_ticks(reader: RecordingReader) -> np.ndarray:
    """The recording's ticks; a recording without a whole tick (cut or damaged) has nothing to export."""
    ticks = reader.read("ticks")
    if ticks.shape[0] == 0:
        raise RecordingError(f"{reader.path}: the recording holds no whole tick; nothing to export")
    return ticks


def export_mot(reader: RecordingReader, path: str, degrees: bool = False) -> int:
    """time (s) and the coordinates (rad, or degrees with ``degrees``) of every tick; returns the rows."""
    frame = recorded_ticks(reader)["frame"]
    labels = ["time", *coordinate_names(reader.header["dof_names"])]
    q = np.degrees(frame["q"]) if degrees else frame["q"]
    return _write(path, "hil run (DAS3 coordinates)", labels, np.column_stack([frame["time"], q]), degrees)


class MuscleStates:
    """Replay listener: each tick's plant activations and muscle forces."""

    def __init__(self) -> None:
        self.activation: list[np.ndarray] = []
        self.force: list[np.ndarray] = []

    def on_tick(self, record, engine, actuation_ns: int) -> None:
        self.activation.append(np.array(engine.plant.outputs.activation))
        self.force.append(np.array(engine.plant.outputs.muscle_force))


def recomputed_muscle_states(path: str, n_ticks: int) -> tuple[np.ndarray, np.ndarray]:
    """(activation, force) per tick and muscle, by a replay that must match the recording bit for bit."""
    states = MuscleStates()
    result = replay_recording(path, [states])
    if not result["identical"] or result["ticks"] != n_ticks:
        raise RecordingError(f"{path}: the replay differs from the recording from tick {result['first_tick']}, so "
                             "activations and forces cannot be recomputed; export with --no-muscle-states")
    return np.array(states.activation), np.array(states.force)


def export_sto(reader: RecordingReader, path: str, muscle_states: bool = True) -> int:
    """Excitations, (recomputed) activations and forces, GH reaction and stability per tick; returns the rows."""
    ticks = recorded_ticks(reader)
    frame, names = ticks["frame"], reader.header["muscle_names"]
    osim = opensim_names()[1]
    das3 = all(m in osim for m in names)         # else the reduced arm's MTGs: torque actuators, N m
    muscles = [osim[m] for m in names] if das3 else list(names)
    labels = ["time", *[f"/forceset/{m}" for m in muscles]]
    columns = [frame["time"], ticks["u"]]
    if muscle_states:
        activation, force = recomputed_muscle_states(reader.path, len(ticks))
        output = "tendon_force" if das3 else "actuation"
        labels += [f"/forceset/{m}/activation" for m in muscles] + [f"/forceset/{m}|{output}" for m in muscles]
        columns += [activation.reshape(len(ticks), -1), force.reshape(len(ticks), -1)]
    gh = np.column_stack([frame["gh_force"], frame["gh_stability"]])
    if np.all(np.isfinite(gh)):                  # the reduced MTG arm models no GH joint: its values are NaN
        labels += [f"GH_on_scapula_r_in_scapula_r_f{c}" for c in "xyz"] + ["GH_stability"]
        columns.append(gh)
    table = np.column_stack(columns)
    if not np.all(np.isfinite(table)):
        raise RecordingError(f"{reader.path}: a recorded excitation, activation or force is not finite")
    return _write(path, "hil run (muscles and GH reaction)", labels, table, False)

