"""Bad input to the analyses (:mod:`sim.analysis.static_opt` and the analyses built on it) is a
:class:`sim.errors.UserInputError`: ``hil analyze`` prints one ``Error: ...`` line and exits 2, no traceback."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import CONFIGS, hil, hil_in_process

from sim.analysis import static_opt as so
from sim.errors import UserInputError

POSTURE = so.Posture(0.8, 0.5, 0.0, 0.66, 1.42)


@pytest.mark.parametrize("args, message", [
    (["static-opt", "--elevation", "nan"], "Error: the posture's elevation must be a finite angle, not nan"),
    (["static-opt", "--elevation", "30", "--plane", "inf"],
     "Error: the posture's plane of elevation must be a finite angle, not inf"),
    (["feedforward", "--start", "nan"], "Error: the posture's elevation must be a finite angle, not nan"),
    (["max-moment", "--task", "abduction", "--angles", "10:10:1", "--gh-limit", "nan"],
     "Error: the GH stability limit must be a finite number, not nan"),
    (["channels", "--config", str(CONFIGS / "elbow-hold.toml"), "--elevation", "nan"],
     "Error: the posture's elevation must be a finite angle, not nan"),
    # finite angles beyond their coordinate's range: an elevation of 500 deg was solved and written as 500 deg
    (["static-opt", "--elevation", "500"], "Error: --elevation 500 deg must lie within 0 and 180 deg"),
    (["static-opt", "--elevation", "60", "--plane", "1e308"], "Error: --plane 1e+308 deg must lie within -90 and 180 deg"),
    (["static-opt", "--elevation", "60", "--girdle", "1,2,3,4,5,1e300"],
     "Error: --girdle: girdle angles must lie within -180 and 180 deg"),
    (["channels", "--config", str(CONFIGS / "elbow-hold.toml"), "--elevation", "60", "--elbow", "400"],
     "Error: --elbow 400 deg must lie within -180 and 180 deg"),
    (["feedforward", "--stop", "500"], "Error: --stop 500 deg must lie within 0 and 180 deg (an elevation)"),
    # a schedule of absurdly many knots (each a static optimisation): an OverflowError or a memory error before
    (["feedforward", "--move", "1e308"],
     "Error: --move 1e+308 s and --hold 0 s at --knot-ms 20 are inf knots, each a static optimisation; at most 2000"),
    (["feedforward", "--knot-ms", "1e-300"],
     "Error: --move 1.3 s and --hold 0 s at --knot-ms 1e-300 are 1.3e+303 knots, each a static optimisation; "
     "at most 2000"),
    (["max-moment", "--task", "abduction", "--angles", "-500:-400:50"],
     "Error: --angles of abduction: the elevation angles must lie within 0 and 180 deg, not -500 to -400"),
])
def test_hil_analyze_reports_bad_input_in_one_line(tmp_path, args, message):
    out = hil_in_process("analyze", *args, "--out", tmp_path / "out")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == message and "Traceback" not in out.stdout + out.stderr


def test_the_api_raises_user_input_errors_for_criterion_loads_and_girdle(model):
    with pytest.raises(UserInputError, match="criterion must be one of a, b, c, d, not 'e'"):
        so.solve_static(model, POSTURE, criterion="e")
    with pytest.raises(UserInputError, match="loads must be 10 finite values"):
        so.solve_static(model, POSTURE, loads=np.full(10, np.nan))
    with pytest.raises(UserInputError, match="girdle must be six finite angles"):
        so.solve_static(model, so.Posture(0.8, 0.5, 0.0, 0.66, 1.42, girdle=(0.0,) * 5))
    with pytest.raises(ValueError):                 # still a ValueError for callers that catch one
        so.check_inputs(POSTURE, float("nan"))


def test_dof_indices_come_from_the_model_names():
    names = so.DOF_NAMES
    assert [names[i] for i in (so.ELBOW, so.PRONATION)] == ["ELx", "PSy"]
    assert [names[i] for i in so.GH_DOFS] == ["GHy", "GHz", "GHyy"]
    assert [names[i] for i in so.GIRDLE_DOFS] == ["SCy", "SCz", "SCx", "ACy", "ACz", "ACx"]


def test_a_trajectory_row_beyond_the_angle_ranges_is_one_line_naming_it(tmp_path):
    """A trajectory whose third row has an elevation of -500 deg: one line naming the file, the line and the
    column, before anything is solved."""
    path = tmp_path / "t.csv"
    path.write_text("elevation_deg,plane_deg\n30,45\n-500,45\n")
    out = hil_in_process("analyze", "static-opt", "--trajectory", path, "--out", tmp_path / "out")
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip() == f"Error: --trajectory {path}, line 3: elevation_deg -500 deg must lie within 0 and 180 deg"



def test_a_static_opt_error_reads_as_its_message_and_pickles_whole():
    """``hil analyze static-opt`` prints a posture that cannot be set up as ``label: <the error>``; the error
    must read as its message (it printed as the tuple of message and solution), and still carry both through
    pickling (sweeps on Dask)."""
    import pickle
    err = pickle.loads(pickle.dumps(so.StaticOptError("cannot place the humerus", None)))
    assert str(err) == "cannot place the humerus" and err.solution is None and err.args[1] is None


@pytest.mark.parametrize("kind", ["device", "not-utf8"])
def test_a_trajectory_that_is_a_device_or_not_utf8_is_one_line(tmp_path, kind):
    """``--trajectory /dev/zero`` hung the command (the CSV was read unbounded) and a Latin-1 file was a
    UnicodeDecodeError traceback; both are one line, the file read the bounded way."""
    path = "/dev/zero" if kind == "device" else tmp_path / "t.csv"
    if kind == "not-utf8":
        path.write_bytes("elevation_deg\n30\n".encode() + b"\xff\n")
    run = hil if kind == "device" else hil_in_process           # a device could hang: its own process
    out = run("analyze", "static-opt", "--trajectory", path, "--out", tmp_path / "out")
    assert out.returncode == 2, out.stderr
    words = "is not a regular file" if kind == "device" else "not UTF-8 text: byte 0xff on line 3"
    assert len(out.stderr.strip().splitlines()) == 1 and words in out.stderr, out.stderr
