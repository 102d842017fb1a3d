"""`hil export --mot/--sto`: a run's recording read back by OpenSim 4.6's own file adapters (the `opensim` package)
with the DAS3 model's coordinate names, units and values; the coordinates drive an OpenSim model built from the
release's joint table to the bones' poses of the plant's kinematics; `hil fit mtg --motion` takes the .mot."""
from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import CONFIGS, file_size_limit, hil, mount_small_tmpfs

from hil.recording.hilrec import RecordingReader
from sim.das3.kinematics import frames
from sim.das3.model import load_model
from sim.das3.release import opensim_names, read_model_data

osim = pytest.importorskip("opensim", reason="the opensim package (OpenSim 4.6) cannot be installed here")
osim.Logger.removeFileSink()                 # no opensim.log in the working directory
osim.Logger.setLevelString("warn")

COORDS = ["SC_y", "SC_z", "SC_x", "AC_y", "AC_z", "AC_x", "GH_y", "GH_z", "GH_yy", "EL_x", "PS_y"]
"""The DAS3 OpenSim model's coordinates in DOF order (Chadwick et al. 2014; das3.osim)."""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    rec = tmp_path_factory.mktemp("osim") / "run.hilrec"
    out = hil("run", "--config", CONFIGS / "elbow-hold.toml", "--duration", "0.4", "--record", rec, "--offline")
    assert out.returncode == 0, out.stderr
    return rec, RecordingReader(str(rec)).read("ticks")


def labels(table) -> list[str]:
    return [table.getColumnLabel(j) for j in range(table.getNumColumns())]


def column(table, name: str) -> np.ndarray:
    """One column, from the table's whole matrix (indexing the VectorView of getDependentColumn crashes OpenSim
    4.6's Python bindings)."""
    return np.array(table.getMatrix().to_numpy()[:, table.getColumnIndex(name)])


def test_mot_is_read_by_opensim_with_the_das3_coordinates_in_radians_or_degrees(run, tmp_path):
    rec, ticks = run
    mot = tmp_path / "run.mot"
    assert hil("export", rec, "--mot", mot).returncode == 0
    table = osim.TimeSeriesTable(str(mot))
    assert labels(table) == COORDS and table.getNumRows() == len(ticks)
    assert table.getTableMetaDataAsString("inDegrees") == "no"
    np.testing.assert_array_equal(np.array(table.getIndependentColumn()), ticks["frame"]["time"])
    for j, c in enumerate(COORDS):
        np.testing.assert_array_equal(column(table, c), ticks["frame"]["q"][:, j])      # %.17g: exact
    deg = tmp_path / "deg.mot"
    assert hil("export", rec, "--mot", deg, "--degrees").returncode == 0
    storage = osim.Storage(str(deg))
    assert storage.isInDegrees() and storage.getSize() == len(ticks)
    assert [storage.getColumnLabels().get(j) for j in range(12)] == ["time", *COORDS]
    elbow = osim.ArrayDouble()
    storage.getDataColumn("EL_x", elbow)
    np.testing.assert_allclose([elbow.get(k) for k in range(elbow.getSize())],
                               np.degrees(ticks["frame"]["q"][:, 9]), rtol=1e-15)


def test_sto_holds_excitations_recomputed_activations_forces_and_the_gh_reaction(run, tmp_path):
    rec, ticks = run
    sto = tmp_path / "run.sto"
    out = hil("export", rec, "--sto", sto)
    assert out.returncode == 0, out.stderr
    table = osim.TimeSeriesTable(str(sto))
    muscles = [opensim_names()[1][m] for m in RecordingReader(str(rec)).header["muscle_names"]]
    assert labels(table) == ([f"/forceset/{m}" for m in muscles] + [f"/forceset/{m}/activation" for m in muscles]
                             + [f"/forceset/{m}|tendon_force" for m in muscles]
                             + [f"GH_on_scapula_r_in_scapula_r_f{c}" for c in "xyz"] + ["GH_stability"])
    assert table.getTableMetaDataAsString("inDegrees") == "no"
    u = np.column_stack([column(table, f"/forceset/{m}") for m in muscles])
    np.testing.assert_array_equal(u, ticks["u"])
    np.testing.assert_array_equal(column(table, "GH_on_scapula_r_in_scapula_r_fy"), ticks["frame"]["gh_force"][:, 1])
    a = np.column_stack([column(table, f"/forceset/{m}/activation") for m in muscles])
    f = np.column_stack([column(table, f"/forceset/{m}|tendon_force") for m in muscles])
    # implicit Euler of da/dt = (u - a)(c1 u + c2) with u held over a tick: each activation lies between the last
    # one and the tick's excitation (Chadwick et al. 2014 eq. 4), so the columns are activations, not excitations
    lo, hi = np.minimum(a[:-1], u[1:]), np.maximum(a[:-1], u[1:])
    assert np.all(a[1:] >= lo - 1e-12) and np.all(a[1:] <= hi + 1e-12)
    assert np.max(np.abs(a - u)) > 1e-3 and np.max(f) > 1.0     # DAS3 forces dip below 0 (linear SEE term, slack)
    plain = tmp_path / "plain.sto"
    assert hil("export", rec, "--sto", plain, "--no-muscle-states").returncode == 0
    assert labels(osim.TimeSeriesTable(str(plain))) == ([f"/forceset/{m}" for m in muscles]
                                                       + [f"GH_on_scapula_r_in_scapula_r_f{c}" for c in "xyz"]
                                                       + ["GH_stability"])


def test_mtg_run_exports_torque_actuators_and_no_gh_columns(tmp_path):
    """The reduced MTG arm: its frame reports the 11 DAS3 angles (girdle frozen), its MTGs are torque actuators
    (``|actuation``, N m) and it has no GH joint, so the .sto has no GH columns."""
    rec, sto, mot = tmp_path / "mtg.hilrec", tmp_path / "mtg.sto", tmp_path / "mtg.mot"
    assert hil("run", "--config", CONFIGS / "elbow-hold-mtg.toml", "--duration", "0.2", "--record", rec,
               "--offline").returncode == 0
    out = hil("export", rec, "--sto", sto, "--mot", mot)
    assert out.returncode == 0, out.stderr
    names = labels(osim.TimeSeriesTable(str(sto)))
    assert "/forceset/elbow_flexor|actuation" in names and "/forceset/elbow_flexor/activation" in names
    assert not [n for n in names if n.startswith("GH_") or n.endswith("|tendon_force")]
    assert labels(osim.TimeSeriesTable(str(mot))) == COORDS


def _chain_model():
    """An OpenSim model of the plant's kinematic chain from the release's joint table (das3_model.json, converted
    from das3.osim): one CustomJoint per DOF with the DOF's axis as its coordinate's rotation."""
    m = read_model_data()[0]
    joints = {j["name"]: j for j in m["joints"]}
    dof_axes = [("sc1", "r1"), ("sc2", "r2"), ("sc3", "r3"), ("ac1", "r1"), ("ac2", "r2"), ("ac3", "r3"),
                ("gh1", "r2"), ("gh2", "r3"), ("gh3", "r2"), ("hu", "r1"), ("ur", "r1")]
    model, parent = osim.Model(), None
    bodies = []
    for k, ((jname, ax), coord) in enumerate(zip(dof_axes, COORDS)):
        axis = np.asarray(joints[jname][f"{ax}_axis"], float)
        axis /= np.linalg.norm(axis)
        others = np.linalg.svd(axis[None, :])[2][1:]              # two unit vectors normal to the axis
        body = osim.Body(f"b{k}", 1.0, osim.Vec3(0.0), osim.Inertia(0.01, 0.01, 0.01))
        model.addBody(body)
        st = osim.SpatialTransform()
        for r, vec in enumerate((axis, *others)):
            ta = st.updTransformAxis(r)
            ta.setAxis(osim.Vec3(*map(float, vec)))
            if r == 0:
                names = osim.ArrayStr()
                names.append(coord)
                ta.setCoordinateNames(names)
            ta.set_function(osim.LinearFunction(1.0, 0.0) if r == 0 else osim.Constant(0.0))     # copied in
        loc = joints[jname]["location"] if jname in ("sc1", "ac1", "gh1", "hu", "ur") else [0.0, 0.0, 0.0]
        joint = osim.CustomJoint(f"j{k}", parent or model.getGround(), osim.Vec3(*loc), osim.Vec3(0.0),
                                 body, osim.Vec3(0.0), osim.Vec3(0.0), st)
        model.addJoint(joint)
        parent = body
        bodies.append(body)
    return model, bodies


def _poses(model, bodies, state):
    model.realizePosition(state)
    out = []
    for b in bodies:
        tf = b.getTransformInGround(state)
        out.append((np.array([[tf.R().get(i, j) for j in range(3)] for i in range(3)]),
                    np.array([tf.p().get(i) for i in range(3)])))
    return out


def _check_rows_drive_the_bones(model, bodies, mot: Path, recorded_q: np.ndarray, every: int = 25):
    """Each checked .mot row set through OpenSim's coordinates poses every body as the plant's kinematics at the
    recorded angles of that tick."""
    state = model.initSystem()
    table = osim.TimeSeriesTable(str(mot))
    arrays = load_model().arrays
    for k in range(0, table.getNumRows(), every):
        row = table.getRowAtIndex(k)
        for j, c in enumerate(labels(table)):
            model.getCoordinateSet().get(c).setValue(state, float(row[j]), False)
        R, P = frames(arrays, recorded_q[k])
        for j, (Rb, pb) in enumerate(_poses(model, bodies, state)):
            np.testing.assert_allclose(Rb, R[0, j + 1], atol=1e-12)
            np.testing.assert_allclose(pb - _poses(model, bodies[:1], state)[0][1] + P[0, 1], P[0, j + 1], atol=1e-12)


def test_mot_rows_pose_opensim_bodies_as_the_plant_kinematics(run, tmp_path):
    rec, ticks = run
    mot = tmp_path / "run.mot"
    assert hil("export", rec, "--mot", mot).returncode == 0
    model, bodies = _chain_model()
    _check_rows_drive_the_bones(model, bodies, mot, ticks["frame"]["q"])


def test_mot_rows_pose_the_published_das3_osim(run, tmp_path):
    """With a local copy of the published das3.osim (HIL_DAS3_OSIM; its licence keeps it out of this repository and
    the test fetches nothing), every .mot column is one of its coordinates and OpenSim poses its clavicle, scapula,
    humerus, ulna and radius as the plant's kinematics (positions relative to the thorax)."""
    path = os.environ.get("HIL_DAS3_OSIM")
    if not path or not Path(path).is_file():
        pytest.skip("set HIL_DAS3_OSIM to a local das3.osim (DAS3 release, Chadwick et al. 2014) to run this check")
    rec, ticks = run
    mot = tmp_path / "run.mot"
    assert hil("export", rec, "--mot", mot).returncode == 0
    model = osim.Model(path)
    coords = model.getCoordinateSet()
    assert all(coords.contains(c) for c in COORDS)
    names = ["thorax", "clavicle_r", "scapula_r", "humerus_r", "ulna_r", "radius_r"]
    bodies = [model.getBodySet().get(n) for n in names]
    state = model.initSystem()
    table = osim.TimeSeriesTable(str(mot))
    arrays = load_model().arrays
    row = table.getRowAtIndex(table.getNumRows() - 1)
    for j, c in enumerate(labels(table)):
        coords.get(c).setValue(state, float(row[j]), False)
    poses = _poses(model, bodies, state)
    R, P = frames(arrays, ticks["frame"]["q"][-1])
    for (Rb, pb), frame, rot in zip(poses[1:], (1, 4, 7, 10, 11), (3, 6, 9, 10, 11)):
        np.testing.assert_allclose(poses[0][0].T @ Rb, R[0, rot], atol=1e-9)
        np.testing.assert_allclose(poses[0][0].T @ (pb - poses[0][1]), P[0, frame], atol=1e-9)


def test_export_errors_are_one_line(run, tmp_path):
    rec, _ = run
    out = hil("export", rec)
    assert out.returncode == 2 and "give at least one of --csv, --mot, --sto" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1
    bad = tmp_path / "bad.mot"
    bad.write_text("version=1\nnRows=9\nendheader\ntime\tEL_x\n0\t1\n")
    out = hil("fit", "mtg", "--motion", bad, "--amax", "1", "--tmax-pe", "1", "--out", tmp_path / "fit")
    assert out.returncode == 2 and "bad.mot: the header says nRows=9, the file has 1 rows" in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("option", ["--csv", "--mot", "--sto"])
def test_an_export_over_its_own_recording_is_refused_and_the_recording_kept(run, tmp_path, option):
    rec, _ = run
    copy = tmp_path / "run.hilrec"
    copy.write_bytes(rec.read_bytes())
    (tmp_path / "link.hilrec").symlink_to(copy)
    for output in (copy, tmp_path / "." / "run.hilrec"):              # the same file, also by another path
        out = hil("export", tmp_path / "link.hilrec", option, output)
        assert out.returncode == 2 and "writing it would destroy it" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
    assert copy.read_bytes() == rec.read_bytes()                      # a .sto over it used to replace it


def test_an_export_to_a_full_disk_is_one_line_naming_it_and_leaves_no_truncated_file(run, tmp_path):
    """The .mot of a 0.4 s run does not fit on an 8 KiB disk: one line naming the file, and no .mot cut short
    (OpenSim would read its rows as the whole run). A file-size limit stands in where no tmpfs can be mounted."""
    rec, _ = run
    disk = tmp_path / "disk"
    mounted = mount_small_tmpfs(disk, "8k")
    try:
        out = hil("export", rec, "--mot", disk / "run.mot", **({} if mounted else {"preexec_fn": file_size_limit(8192)}))
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert out.returncode == 2 and len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
        assert lines[0].startswith(f"Error: {disk / 'run.mot'}: ")
        assert ("No space left" if mounted else "too large") in lines[0], lines[0]
        assert list(disk.iterdir()) == []
    finally:
        if mounted:
            subprocess.run(["umount", str(disk)])


def test_a_recording_cut_before_its_first_tick_exports_no_opensim_file(tmp_path):
    from hil.recording.hilrec import RecordingError, read_run_recording
    data = (Path(__file__).resolve().parents[1] / "data" / "elbow-hold-v0.4.hilrec").read_bytes()
    cut = tmp_path / "cut.hilrec"
    for size in range(100, len(data), 50):               # the first cut whose header reads: no whole tick yet
        cut.write_bytes(data[:size])
        try:
            read_run_recording(str(cut))
            break
        except RecordingError:
            continue
    assert read_run_recording(str(cut)).read("ticks").shape[0] == 0
    for option in ("--mot", "--sto"):                   # the .sto used to end in a reshape traceback
        out = hil("export", cut, option, tmp_path / f"cut{option[2:]}")
        assert out.returncode == 2 and "the recording holds no whole tick; nothing to export" in out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and not (tmp_path / f"cut{option[2:]}").exists()


def test_two_exports_to_one_file_are_refused(run, tmp_path):
    rec, _ = run
    out = hil("export", rec, "--mot", tmp_path / "run.mot", "--sto", tmp_path / "." / "run.mot")
    assert out.returncode == 2 and f"--mot and --sto are one file, {tmp_path / 'run.mot'}" in out.stderr
    assert not (tmp_path / "run.mot").exists()


def test_fit_mtg_takes_the_exported_mot(run, tmp_path):
    """The .mot of a DAS3 run: the fit computes the thoracohumeral angles from the 11 coordinates."""
    rec, ticks = run
    mot = tmp_path / "run.mot"
    assert hil("export", rec, "--mot", mot, "--degrees").returncode == 0
    out = hil("fit", "mtg", "--motion", mot, "--amax", "1", "--tmax-pe", "1", "--out", tmp_path / "fit", "--json")
    assert out.returncode in (0, 1), out.stderr
    report = json.loads(out.stdout)
    assert report["samples"] == len(ticks) and report["torques"] == "inverse dynamics"
    assert math.isfinite(report["fit_time_s"])
    again = hil("fit", "mtg", "--motion", mot, "--amax", "1", "--tmax-pe", "1", "--out", tmp_path / "fit", "--json")
    assert again.returncode == out.returncode and json.loads(again.stdout)["mtgs"] == report["mtgs"]  # the same dir
    for args, words in ((["--out", mot], f"--out {mot} is a file, not a directory"),
                        (["--out", tmp_path / "f2", "--max-scale", "nan"], "--max-scale must be a finite number > 0")):
        bad = hil("fit", "mtg", "--motion", mot, "--amax", "1", "--tmax-pe", "1", *args)
        assert bad.returncode == 2 and words in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
