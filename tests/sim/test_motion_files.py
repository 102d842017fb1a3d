"""Motion import (sim.motion): .mot/.sto and TRC files written by OpenSim 4.6's own adapters, C3D written by ezc3d,
read back in SI units and radians; resampling; the DAS3 reference trajectory (coordinates and the elbow from
markers); and one clear error for each malformed file."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.das3.kinematics import LANDMARKS, landmarks
from sim.das3.layout import DOF_NAMES
from sim.das3.model import load_model
from sim.das3.release import opensim_names
from sim.motion.data import MotionFileError, resample
from sim.motion.files import read_motion
from sim.motion.reference import reference_trajectory, thoracohumeral_angles

osim = pytest.importorskip("opensim", reason="the opensim package (OpenSim 4.6) cannot be installed here")
osim.Logger.removeFileSink()                 # no opensim.log in the working directory
osim.Logger.setLevelString("warn")
ezc3d = pytest.importorskip("ezc3d", reason="ezc3d cannot be installed here")

COORDS = [opensim_names()[0][d] for d in DOF_NAMES]


def write_sto(path, labels, t, values, in_degrees: str | None):
    """A Storage file written by OpenSim's STOFileAdapter (the peer whose files users bring)."""
    table = osim.TimeSeriesTable()
    table.setColumnLabels(list(labels))
    for k, tk in enumerate(t):
        table.appendRow(float(tk), osim.RowVector([float(v) for v in values[k]]))
    if in_degrees is not None:
        table.addTableMetaDataString("inDegrees", in_degrees)
    osim.STOFileAdapter().write(table, str(path))


def write_trc(path, names, t, xyz, units="mm"):
    table = osim.TimeSeriesTableVec3()
    table.setColumnLabels(list(names))
    for k, tk in enumerate(t):
        table.appendRow(float(tk), osim.RowVectorVec3([osim.Vec3(*map(float, p)) for p in xyz[k]]))
    table.addTableMetaDataString("DataRate", str(1.0 / (t[1] - t[0])))
    table.addTableMetaDataString("Units", units)
    osim.TRCFileAdapter().write(table, str(path))


def write_c3d(path, names, xyz, rate=100.0, units="mm"):
    c3d = ezc3d.c3d()
    c3d["parameters"]["POINT"]["RATE"]["value"] = [rate]
    c3d["parameters"]["POINT"]["LABELS"]["value"] = list(names)
    c3d["parameters"]["POINT"]["UNITS"]["value"] = [units]
    pts = np.ones((4, len(names), xyz.shape[0]))
    pts[:3] = np.transpose(xyz, (2, 1, 0))
    c3d["data"]["points"] = pts
    c3d.write(str(path))


@pytest.fixture(scope="module")
def posture():
    """A smooth sweep of all 11 DOFs inside their ranges, 2 s at 100 Hz."""
    model = load_model()
    t = np.arange(201) * 0.01
    lo, hi = model.dof_ranges[:, 0], model.dof_ranges[:, 1]
    q = lo + (hi - lo) * (0.5 + 0.4 * np.sin(2 * np.pi * 0.5 * t[:, None] + np.arange(11)))
    return model, t, q


def test_mot_in_degrees_written_by_opensim_reads_back_in_radians(tmp_path, posture):
    _, t, q = posture
    path = tmp_path / "ik.mot"
    write_sto(path, COORDS, t, np.degrees(q), "yes")
    m = read_motion(path)
    assert m.names == tuple(COORDS) and not m.markers
    np.testing.assert_allclose(m.time, t, rtol=0, atol=1e-12)
    np.testing.assert_allclose(m.values, q, rtol=1e-12, atol=1e-12)
    write_sto(path, [*COORDS, "hand_force_y"], t, np.column_stack([q, np.full(t.size, 3.0)]), "no")
    m = read_motion(path)                       # radians stay radians; a force column is never converted
    np.testing.assert_allclose(m.values[:, :11], q, rtol=1e-12)
    assert np.all(m.column("hand_force_y") == 3.0)


def test_reference_trajectory_from_a_mot_is_the_resampled_coordinates(tmp_path, posture):
    _, t, q = posture
    path = tmp_path / "ik.mot"
    write_sto(path, COORDS, t, np.degrees(q), "yes")
    tr, qr = reference_trajectory(path, 0.004, dofs=("ELx", "GHz"))
    assert tr[0] == 0.0 and np.allclose(np.diff(tr), 0.004) and tr[-1] <= 2.0 + 1e-12 and tr.size == 501
    for j, d in enumerate(("ELx", "GHz")):
        np.testing.assert_allclose(qr[:, j], np.interp(tr, t, q[:, DOF_NAMES.index(d)]), rtol=1e-12, atol=1e-12)


def test_trc_written_by_opensim_reads_back_in_metres(tmp_path, posture):
    model, t, q = posture
    pts = landmarks(model.arrays, q)                     # (n, 9, 3) m
    path = tmp_path / "arm.trc"
    write_trc(path, LANDMARKS, t, pts * 1000.0, "mm")
    m = read_motion(path)
    assert m.markers and m.names == LANDMARKS
    np.testing.assert_allclose(m.values, pts, rtol=0, atol=1e-9)
    np.testing.assert_allclose(m.time, t, atol=1e-12)


def test_c3d_written_by_ezc3d_reads_back_in_metres(tmp_path, posture):
    model, t, q = posture
    pts = landmarks(model.arrays, q)
    path = tmp_path / "arm.c3d"
    write_c3d(path, LANDMARKS, pts * 1000.0)
    m = read_motion(path)
    assert m.names == LANDMARKS
    np.testing.assert_allclose(m.values, pts, rtol=0, atol=1e-6)     # C3D stores float32
    np.testing.assert_allclose(m.time, t, atol=1e-9)


def test_elbow_from_markers_follows_the_model_elbow(tmp_path, posture):
    """Shoulder (GH centre), elbow centre and wrist of the model's own kinematics as markers: at fixed pronation
    the marker angle minus its offset at the first sample is ELx within 0.5 deg; with pronation moving too,
    within the 11 deg the wrist point turns with the radius (the module docstring's figures)."""
    model, t, q = posture
    elbow = DOF_NAMES.index("ELx")
    idx = [LANDMARKS.index(k) for k in ("GH", "EL", "WR")]
    names = {"shoulder": "S", "elbow": "E", "wrist": "W"}
    for fixed_pronation, tol_deg in ((True, 0.5), (False, 11.0)):
        qq = q.copy()
        if fixed_pronation:
            qq[:, DOF_NAMES.index("PSy")] = 1.0
        path = tmp_path / f"arm{fixed_pronation}.c3d"
        write_c3d(path, ["S", "E", "W"], landmarks(model.arrays, qq)[:, idx] * 1000.0)
        offset = reference_trajectory(path, 0.01, dofs=("ELx",), markers=names)[1][0, 0] - qq[0, elbow]
        assert math.radians(15.0) < offset < math.radians(20.0)
        tr, el = reference_trajectory(path, 0.01, dofs=("ELx",), markers=names, elbow_offset_rad=offset)
        assert tr.size == t.size and np.max(np.abs(el[:, 0] - qq[:, elbow])) < math.radians(tol_deg)
    with pytest.raises(MotionFileError, match="markers give only the elbow"):
        reference_trajectory(path, 0.01, dofs=("ELx", "GHz"))
    with pytest.raises(MotionFileError, match="no marker RSHO"):
        reference_trajectory(path, 0.01, dofs=("ELx",))


def test_thoracohumeral_angles_equal_the_plants_outputs():
    from sim.das3.plant import Plant
    plant = Plant(load_model())
    q = np.array(plant.outputs.q)[None, :]
    np.testing.assert_allclose(thoracohumeral_angles(plant.model.arrays, q)[0], plant.outputs.th_angles, atol=1e-12)


def test_resample_rejects_a_bad_period(tmp_path, posture):
    _, t, q = posture
    path = tmp_path / "ik.mot"
    write_sto(path, COORDS, t, q, "no")
    m = read_motion(path)
    for bad in (0.0, -1.0, float("nan"), 1e-12):
        with pytest.raises(MotionFileError, match=str(path)):
            resample(m, bad)


STO_HEAD = "version=1\nnRows={rows}\nnColumns=3\ninDegrees={deg}\nendheader\ntime\tEL_x\tPS_y\n"


def _sto(rows=3, deg="no", body="0\t1\t2\n0.01\t1\t2\n0.02\t1\t2\n"):
    return STO_HEAD.format(rows=rows, deg=deg) + body


BAD_FILES = {
    "empty.mot": ("", "no 'endheader'"),
    "noheader.mot": ("time\tEL_x\n0\t1\n", "no 'endheader'"),
    "truncated.mot": (_sto(rows=100), "nRows=100"),
    "nan.mot": (_sto(body="0\t1\t2\n0.01\tnan\t2\n0.02\t1\t2\n"), "'EL_x' is missing or not finite at sample 1"),
    "text.mot": (_sto(body="0\t1\t2\n0.01\tabc\t2\n0.02\t1\t2\n"), "not a number"),
    "short_row.mot": (_sto(body="0\t1\t2\n0.01\t1\n0.02\t1\t2\n"), "has 2 values, not 3"),
    "units.mot": (_sto(deg="radians"), "inDegrees='radians'"),
    "nounits.mot": (_sto().replace("inDegrees=no\n", ""), "inDegrees='(missing)'"),
    "absurd.mot": (_sto().replace("nColumns=3", "nColumns=1000000000"), "out of range"),
    "notime.mot": (_sto().replace("time\t", "t\t"), "first column must be 'time'"),
    "backwards.mot": (_sto(body="0\t1\t2\n0.02\t1\t2\n0.01\t1\t2\n"), "time does not increase"),
    "one_row.mot": (_sto(rows=1, body="0\t1\t2\n"), "1 samples"),
    "units.trc": ("PathFileType\t4\t(X/Y/Z)\tx.trc\nDataRate\tCameraRate\tNumFrames\tNumMarkers\tUnits\n"
                  "100\t100\t2\t1\tinch\nFrame#\tTime\tM\n\t\tX1\tY1\tZ1\n\n1\t0\t1\t2\t3\n2\t0.01\t1\t2\t3\n",
                  "Units='inch'"),
    "cut.trc": ("PathFileType\t4\t(X/Y/Z)\tx.trc\nDataRate\tCameraRate\tNumFrames\tNumMarkers\tUnits\n"
                "100\t100\t5\t1\tmm\nFrame#\tTime\tM\n\t\tX1\tY1\tZ1\n\n1\t0\t1\t2\t3\n2\t0.01\t1\t2\t3\n",
                "NumFrames=5 but 2 frames"),
    "gap.trc": ("PathFileType\t4\t(X/Y/Z)\tx.trc\nDataRate\tCameraRate\tNumFrames\tNumMarkers\tUnits\n"
                "100\t100\t2\t1\tmm\nFrame#\tTime\tM\n\t\tX1\tY1\tZ1\n\n1\t0\t1\t2\t3\n2\t0.01\t\t\t\n",
                "'M' is missing or not finite at sample 1"),
    "garbage.c3d": ("this is not a c3d file at all" * 10, "not a readable C3D file"),
    "motion.csv": ("time,ELx\n0,1\n", "unknown motion file type"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_a_malformed_motion_file_is_one_clear_error(tmp_path, name):
    text, reason = BAD_FILES[name]
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(MotionFileError) as err:
        read_motion(path)
    assert str(path) in str(err.value) and reason in str(err.value) and "\n" not in str(err.value)


def test_a_cut_c3d_and_a_binary_mot_are_one_clear_error(tmp_path):
    good = tmp_path / "good.c3d"
    write_c3d(good, ["A", "B"], np.random.default_rng(0).random((50, 2, 3)))
    cut = tmp_path / "cut.c3d"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(MotionFileError, match="cut.c3d: not a readable C3D file"):
        read_motion(cut)
    binary = tmp_path / "binary.mot"
    binary.write_bytes(b"\xff\xfe\x00" * 50)
    with pytest.raises(MotionFileError, match="not UTF-8"):
        read_motion(binary)


def damaged_c3d(tmp_path, damage=lambda data: data.__delitem__(slice(1104, 1135))):
    """A C3D whose parameter section lost 31 bytes (found by mutating files): ezc3d 1.7 crashes the process that
    reads it with a segmentation fault."""
    names, t = ["RSHO", "RELB", "RWRA"], np.arange(50) * 0.01
    xyz = np.stack([np.column_stack([np.zeros(50), np.full(50, 1400.0), np.zeros(50)]),
                    np.column_stack([np.zeros(50), np.full(50, 1100.0), np.zeros(50)]),
                    np.column_stack([np.full(50, 250.0), 1100.0 + t * 100, np.zeros(50)])], axis=1)
    good = tmp_path / "good.c3d"
    write_c3d(good, names, xyz)
    data = bytearray(good.read_bytes())
    damage(data)
    path = tmp_path / "damaged.c3d"
    path.write_bytes(bytes(data))
    return path


def test_a_c3d_that_crashes_its_reader_is_one_clear_error_and_this_process_lives(tmp_path):
    path = damaged_c3d(tmp_path)
    with pytest.raises(MotionFileError, match="damaged.c3d: not a readable C3D file") as err:
        read_motion(path)
    assert "\n" not in str(err.value)


def test_a_c3d_on_which_its_reader_never_ends_is_one_clear_error_in_bounded_time(tmp_path, monkeypatch):
    import sim.motion.c3d as c3d
    monkeypatch.setattr(c3d, "CHILD_TIMEOUT_S", 1.0)
    path = damaged_c3d(tmp_path, damage=lambda data: data.__setitem__(1104, 30))    # ezc3d 1.7 loops on it
    with pytest.raises(MotionFileError, match=r"damaged.c3d: not a readable C3D file \(reading it took over 1 s\)"):
        read_motion(path)


def test_whatever_ends_the_c3d_reader_is_one_line(tmp_path, monkeypatch):
    import sim.motion.c3d as c3d
    good = tmp_path / "good.c3d"
    write_c3d(good, ["A", "B"], np.random.default_rng(0).random((50, 2, 3)))
    for name, value, words in (
            ("CHILD", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "ezc3d, crashed on it: signal 11"),
            ("CHILD_MEMORY_BYTES", 64 << 20, "not a readable C3D file ("),      # too little to import numpy
            ("CHILD_TIMEOUT_S", 1e-3, "reading it took over 0.00")):
        with monkeypatch.context() as patch:
            patch.setattr(c3d, name, value)
            c3d._read_cached.cache_clear()
            with pytest.raises(MotionFileError, match="good.c3d: ") as err:
                read_motion(good)
            assert words in str(err.value) and "\n" not in str(err.value)
    c3d._read_cached.cache_clear()
    assert read_motion(good).values.shape == (50, 2, 3)


def test_a_c3d_is_read_once_per_version_of_the_file(tmp_path, monkeypatch):
    import subprocess

    import sim.motion.c3d as c3d
    calls = []
    run = subprocess.run
    monkeypatch.setattr(c3d.subprocess, "run", lambda *a, **k: calls.append(a) or run(*a, **k))
    path = tmp_path / "ref.c3d"
    write_c3d(path, ["A", "B"], np.random.default_rng(0).random((50, 2, 3)))
    first, again = read_motion(path), read_motion(path)
    assert len(calls) == 1 and again is first and not first.values.flags.writeable
    write_c3d(path, ["A", "B"], np.random.default_rng(1).random((60, 2, 3)))     # a new version of the file
    assert read_motion(path).values.shape == (60, 2, 3) and len(calls) == 2


def test_a_motion_file_above_the_size_limit_is_refused_before_it_is_read(tmp_path, monkeypatch):
    import sim.motion.data as data
    mot = tmp_path / "big.mot"
    mot.write_text("big\nversion=1\nendheader\ntime\tEL_x\n0\t1\n0.01\t1\n")
    c3d = tmp_path / "big.c3d"
    write_c3d(c3d, ["A", "B"], np.random.default_rng(0).random((50, 2, 3)))
    monkeypatch.setattr(data, "MAX_FILE_BYTES", 40)            # the limit (1 GiB), scaled to these files
    for path in (mot, c3d):
        with pytest.raises(MotionFileError, match=f"{path.name}: {path.stat().st_size} bytes; a motion file holds at "
                                                  "most 40"):
            read_motion(path)


@pytest.mark.parametrize("suffix", [".mot", ".sto", ".trc", ".c3d"])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_motion_file_that_is_a_fifo_or_a_device_is_refused_unread(tmp_path, suffix, kind):
    """A FIFO named like a motion file blocked the text readers for ever, and a link to /dev/zero passed the size
    check (a device has size 0) and was read without end: a motion file must be a regular file, checked before it
    is read. In a thread, so that a reader that waits fails the test instead of hanging it."""
    import os
    import threading
    path = tmp_path / f"motion{suffix}"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    outcome = []

    def read():
        try:
            read_motion(path)
        except MotionFileError as exc:
            outcome.append(str(exc))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)
    assert outcome == [f"{path}: is not a regular file (a directory, device, FIFO or socket); nothing was read"]
