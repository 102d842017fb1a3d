"""CLI file formats: state files (--initial, --out of equilibrium) and the simulation output CSV."""
import json
import re
from importlib import resources
from types import SimpleNamespace

import numpy as np
import pytest

from hil.recording.files import OutputRecorder, StateFileError, load_state_file, output_columns, write_state_json

DOFS = ("SCy", "SCz", "SCx", "ACy", "ACz", "ACx", "GHy", "GHz", "GHyy", "ELx", "PSy")


def published_state() -> np.ndarray:
    doc = json.loads(resources.files("sim.data").joinpath("das3_equilibrium.json").read_text())
    return np.array(doc["x"])


def test_reads_the_published_equilibrium_json():
    path = resources.files("sim.data").joinpath("das3_equilibrium.json")
    x = load_state_file(str(path), 298)
    assert x.shape == (298,) and x.dtype == np.float64
    np.testing.assert_array_equal(x, published_state())


def test_json_round_trip_is_exact(tmp_path):
    x = published_state() * (1 + 1e-12)
    write_state_json(tmp_path / "s.json", x, "test")
    np.testing.assert_array_equal(load_state_file(tmp_path / "s.json", 298), x)
    assert json.loads((tmp_path / "s.json").read_text())["description"] == "test"


def test_bare_json_list(tmp_path):
    (tmp_path / "s.json").write_text("[1, 2.5, 3]")
    np.testing.assert_array_equal(load_state_file(tmp_path / "s.json", 3), [1.0, 2.5, 3.0])


@pytest.mark.parametrize("text", ["1,2,3\n", "a,b,c\n1,2,3\n", "\n1, 2 ,3\n\n"])
def test_one_row_csv_with_optional_header(tmp_path, text):
    (tmp_path / "s.csv").write_text(text)
    np.testing.assert_array_equal(load_state_file(tmp_path / "s.csv", 3), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("name, text, words", [
    ("s.json", "{\"y\": [1, 2, 3]}", "no key 'x'"),
    ("s.json", "{\"x\": [1, 2]}", "expected 3 state values, found 2"),
    ("s.json", "{\"x\": [1, \"a\", 3]}", "state value 1 is not a number"),
    ("s.json", "{\"x\": [1, NaN, 3]}", "state value 1 is not finite"),
    ("s.json", "{\"x\": 3}", "expected a JSON list"),
    ("s.json", "{", "invalid JSON"),
    ("s.csv", "", "empty file"),
    ("s.csv", "1,2,3\n4,5,6\n", "expected one row"),
    ("s.csv", "1,2\n", "expected 3 state values, found 2"),
    ("s.csv", "1,x,3\n4,5,6\n7,8,9\n", "expected one row"),
    ("s.csv", "1,inf,3\n", "not finite"),
])
def test_bad_state_files(tmp_path, name, text, words):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(StateFileError) as info:
        load_state_file(path, 3)
    assert isinstance(info.value, ValueError)
    assert str(path) in str(info.value) and words in str(info.value)


def test_output_columns():
    cols = output_columns(DOFS)
    assert len(cols) == 39 and len(set(cols)) == 39
    assert cols[:13] == ("time", *DOFS, "gh_stability")
    assert cols[-11:] == tuple(f"{d}_velocity" for d in DOFS)
    assert cols[13:28] == ("th_plane_of_elevation", "th_elevation", "th_axial_rotation",
                           "hand_x", "hand_y", "hand_z", "gh_force_x", "gh_force_y", "gh_force_z",
                           "ts_contact_force_x", "ts_contact_force_y", "ts_contact_force_z",
                           "ai_contact_force_x", "ai_contact_force_y", "ai_contact_force_z")


def test_output_recorder_places_each_output_and_saves_exactly(tmp_path):
    rng = np.random.default_rng(1)
    outputs = SimpleNamespace(q=rng.normal(size=11), qdot=rng.normal(size=11),
                              th_angles=rng.normal(size=3), hand_position=rng.normal(size=3),
                              gh_force=rng.normal(size=3), gh_stability=-0.62,
                              st_contact_force=rng.normal(size=(2, 3)))
    rec = OutputRecorder(DOFS, n_rows=3)
    rec.record(0.0, outputs)
    rec.record(0.004, outputs)
    rec.save(tmp_path / "o.csv")
    lines = (tmp_path / "o.csv").read_text().splitlines()
    assert lines[0] == ",".join(output_columns(DOFS)) and len(lines) == 3
    data = np.loadtxt(tmp_path / "o.csv", delimiter=",", skiprows=1)
    col = {name: i for i, name in enumerate(output_columns(DOFS))}
    row = data[1]
    assert row[col["time"]] == 0.004
    np.testing.assert_array_equal(row[[col[d] for d in DOFS]], outputs.q)
    np.testing.assert_array_equal(row[[col[f"{d}_velocity"] for d in DOFS]], outputs.qdot)
    assert row[col["gh_stability"]] == -0.62
    np.testing.assert_array_equal(row[col["th_plane_of_elevation"]:col["th_axial_rotation"] + 1],
                                  outputs.th_angles)
    np.testing.assert_array_equal(row[col["hand_x"]:col["hand_z"] + 1], outputs.hand_position)
    np.testing.assert_array_equal(row[col["gh_force_x"]:col["gh_force_z"] + 1], outputs.gh_force)
    np.testing.assert_array_equal(row[col["ts_contact_force_x"]:col["ts_contact_force_z"] + 1],
                                  outputs.st_contact_force[0])
    np.testing.assert_array_equal(row[col["ai_contact_force_x"]:col["ai_contact_force_z"] + 1],
                                  outputs.st_contact_force[1])


# -- the bounded read of every input file ---------------------------------------------------------------

def test_read_input_file_reads_a_regular_file_up_to_the_cap(tmp_path):
    from sim.input_file import read_input_file
    p = tmp_path / "f.txt"
    p.write_bytes(b"x" * 100)
    assert read_input_file(p, 100) == b"x" * 100 and read_input_file(p, None) == b"x" * 100


@pytest.mark.parametrize("kind", ["directory", "fifo", "device", "oversized"])
def test_read_input_file_refuses_what_it_cannot_bound_before_reading(tmp_path, kind):
    """A FIFO without a writer would block a plain open forever; /dev/zero would fill the memory."""
    import os

    from sim.input_file import InputFileError, read_input_file
    path = {"directory": tmp_path, "device": "/dev/zero"}.get(kind, tmp_path / "f")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "oversized":
        path.write_bytes(b"x" * 101)
    with pytest.raises(InputFileError, match="directory|not a regular file|101 bytes; at most 100"):
        read_input_file(path, 100)


def test_a_fifo_as_the_state_file_is_a_state_file_error(tmp_path):
    import os
    path = tmp_path / "state.json"
    os.mkfifo(path)
    with pytest.raises(StateFileError, match="not a regular file"):
        load_state_file(path, 3)


@pytest.mark.parametrize("index, value, message", [
    (9, 50.0, "angle ELx is 50 rad, beyond +-pi"),
    (2 * 11 + 4, 0.01, "fibre state s of trapscap5 is 0.01, below 0.05"),
    (2 * 11 + 138 + 5, -3.0, "activation of trapscap6 is -3, outside [0, 1]"),
    (2 * 11 + 138 + 5, 1.5, "activation of trapscap6 is 1.5, outside [0, 1]"),
])
def test_a_state_the_model_cannot_take_is_refused_by_name(tmp_path, index, value, message):
    """A state file whose values are finite but outside what the model can be in (an angle beyond +-180 deg, a
    collapsed fibre, an activation outside [0, 1]) is one StateFileError naming the element; the published
    equilibrium, at the edge of none, is taken."""
    from hil.recording.files import load_model_state
    from sim.das3.model import load_model
    model = load_model()
    write_state_json(tmp_path / "ok.json", published_state(), "published")
    np.testing.assert_array_equal(load_model_state(tmp_path / "ok.json", model), published_state())
    x = published_state()
    x[index] = value
    write_state_json(tmp_path / "s.json", x, "bad")
    with pytest.raises(StateFileError, match=re.escape(f"not a state of the DAS3 model: {message}")):
        load_model_state(tmp_path / "s.json", model)
