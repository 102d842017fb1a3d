"""Excitation CSV files: format, zero-order hold and every error case."""
import json
import math
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from sim.das3.excitations import ExcitationFileError, ExcitationSchedule, load_excitation_csv, write_ramp_csv

NAMES = ("trapscap1", "deltscap1", "bicl", "infra1")
REPO = Path(__file__).resolve().parents[2]


def write(tmp_path, text, name="u.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def load_error(tmp_path, text) -> ExcitationFileError:
    path = write(tmp_path, text)
    with pytest.raises(ExcitationFileError) as info:
        load_excitation_csv(path, NAMES)
    assert isinstance(info.value, ValueError)
    assert str(path) in str(info.value)
    return info.value


# ---------------------------------------------------------------------------------------------- format

def test_loads_columns_in_any_order_and_missing_muscles_are_zero(tmp_path):
    path = write(tmp_path, "bicl,time,trapscap1\n0.5,0.0,0.25\n0.75,0.1,1.0\n")
    s = load_excitation_csv(path, NAMES)
    assert s.times.dtype == np.float64 and s.values.dtype == np.float64
    np.testing.assert_array_equal(s.times, [0.0, 0.1])
    np.testing.assert_array_equal(s.values, [[0.25, 0.0, 0.5, 0.0], [1.0, 0.0, 0.75, 0.0]])
    assert s.n_muscles == 4
    assert s.n_out_of_range == 0
    assert s.source == str(path)


def test_time_only_file_gives_all_zero_excitations(tmp_path):
    s = load_excitation_csv(write(tmp_path, "time\n0\n1\n"), NAMES)
    np.testing.assert_array_equal(s.values, np.zeros((2, 4)))


def test_blank_lines_spaces_and_byte_order_mark_are_tolerated(tmp_path):
    path = tmp_path / "u.csv"
    path.write_bytes("\ufeff\n time , bicl \n\n0.0, 0.5\n\n 0.2 ,1e-1\n".encode("utf-8"))
    s = load_excitation_csv(path, NAMES)
    np.testing.assert_array_equal(s.times, [0.0, 0.2])
    np.testing.assert_array_equal(s.values[:, 2], [0.5, 0.1])


def test_values_outside_unit_interval_are_kept_and_counted(tmp_path):
    s = load_excitation_csv(write(tmp_path, "time,trapscap1,bicl\n0,-0.1,1.0\n1,1.5,0.0\n2,1.0000001,0.5\n"),
                            NAMES)
    assert s.n_out_of_range == 3
    assert s.values[0, 0] == -0.1 and s.values[1, 0] == 1.5


def test_full_precision_is_kept(tmp_path):
    v = 0.1 + 0.2  # 0.30000000000000004
    s = load_excitation_csv(write(tmp_path, f"time,bicl\n0,{v!r}\n"), NAMES)
    assert s.values[0, 2] == v


# ------------------------------------------------------------------------------------ zero-order hold

@pytest.fixture
def schedule(tmp_path):
    return load_excitation_csv(
        write(tmp_path, "time,trapscap1,infra1\n0.1,0.1,1\n0.2,0.2,2\n0.3,0.3,3\n"), NAMES)


@pytest.mark.parametrize("t, row", [
    (-5.0, 0), (0.0, 0), (0.1, 0), (0.15, 0), (0.2, 1), (0.2999, 1), (0.3, 2), (0.31, 2), (1e9, 2),
    (0.1 + 0.2, 2), (3 * 0.1, 2),  # rounding just above or below a row's time still picks the row
    (0.3 - 1e-12, 2), (0.3 - 1e-6, 1),
])
def test_zero_order_hold(schedule, t, row):
    np.testing.assert_array_equal(schedule.at(t), schedule.values[row])
    assert schedule.index(t) == row


def test_at_returns_a_read_only_view_without_copying(schedule):
    u = schedule.at(0.25)
    assert np.shares_memory(u, schedule.values)
    assert u.shape == (4,)
    with pytest.raises(ValueError):
        u[0] = 1.0


def test_fill_writes_into_the_given_array(schedule):
    out = np.full(4, np.nan)
    assert schedule.fill(0.25, out) is out
    np.testing.assert_array_equal(out, [0.2, 0.0, 0.0, 2.0])


def test_non_finite_time_is_rejected(schedule):
    for t in (math.nan, math.inf):
        with pytest.raises(ValueError):
            schedule.at(t)


def test_schedule_from_arrays_validates():
    s = ExcitationSchedule([0.0, 1.0], [[0.0, 2.0], [0.5, -1.0]])
    assert s.n_out_of_range == 2 and s.source is None
    with pytest.raises(ValueError):
        ExcitationSchedule([0.0, 0.0], [[0.0], [0.0]])
    with pytest.raises(ValueError):
        ExcitationSchedule([0.0, 1.0], [[0.0, 1.0]])
    with pytest.raises(ValueError):
        ExcitationSchedule([0.0], [[math.nan]])
    with pytest.raises(ValueError):
        ExcitationSchedule([], np.zeros((0, 3)))


# ---------------------------------------------------------------------------------------------- errors

def test_unknown_muscle_is_named_with_the_closest_valid_name(tmp_path):
    err = load_error(tmp_path, "time,trapscap1,deltscapl\n0,0,0\n")
    assert "'deltscapl'" in str(err) and "'deltscap1'" in str(err)
    assert err.line == 1 and err.column == "3"
    assert "line 1" in str(err) and "column 3" in str(err)


def test_unknown_muscle_without_close_match(tmp_path):
    err = load_error(tmp_path, "time,zzzzqqq\n0,0\n")
    assert "unknown muscle 'zzzzqqq'" in str(err) and "did you mean" not in str(err)


def test_wrongly_capitalised_time_column_suggests_time(tmp_path):
    err = load_error(tmp_path, "Time,bicl\n0,0\n")
    assert "'Time'" in str(err) and "'time'" in str(err)


def test_missing_time_column(tmp_path):
    err = load_error(tmp_path, "bicl,infra1\n0,0\n")
    assert "no 'time' column" in str(err)


def test_duplicate_time_column(tmp_path):
    err = load_error(tmp_path, "time,bicl,time\n0,0,0\n")
    assert "duplicate column 'time'" in str(err) and err.column == "3"


def test_duplicate_muscle_column(tmp_path):
    err = load_error(tmp_path, "time,bicl,bicl\n0,0,0\n")
    assert "duplicate column 'bicl'" in str(err)


def test_empty_column_name(tmp_path):
    err = load_error(tmp_path, "time,,bicl\n0,0,0\n")
    assert "empty column name" in str(err) and err.column == "2"


@pytest.mark.parametrize("text", ["", "\n\n", " , \n"])
def test_empty_file(tmp_path, text):
    assert "empty file" in str(load_error(tmp_path, text))


def test_header_without_data_rows(tmp_path):
    assert "no data rows" in str(load_error(tmp_path, "time,bicl\n\n"))


def test_non_numeric_cell_names_line_and_column(tmp_path):
    err = load_error(tmp_path, "time,bicl\n0,0\n0.1,abc\n")
    assert err.line == 3 and "'bicl'" in err.column and "column 2" in str(err)
    assert "not a number: 'abc'" in str(err)


def test_empty_cell(tmp_path):
    err = load_error(tmp_path, "time,bicl\n0,\n")
    assert "empty cell" in str(err) and err.line == 2


@pytest.mark.parametrize("cell", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999"])
def test_non_finite_cell(tmp_path, cell):
    err = load_error(tmp_path, f"time,bicl\n0,0\n1,{cell}\n")
    assert "not finite" in str(err) and err.line == 3


def test_non_finite_time(tmp_path):
    err = load_error(tmp_path, "time,bicl\nnan,0\n")
    assert "not finite" in str(err) and "'time'" in err.column


@pytest.mark.parametrize("second", ["0.1", "0.05"])
def test_time_not_strictly_increasing(tmp_path, second):
    err = load_error(tmp_path, f"time,bicl\n0.1,0\n{second},0\n")
    assert "strictly increasing" in str(err) and err.line == 3


def test_row_of_wrong_length(tmp_path):
    err = load_error(tmp_path, "time,bicl\n0,0,0\n")
    assert "expected 2 cells" in str(err) and err.line == 2


def test_missing_file_raises_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_excitation_csv(tmp_path / "nope.csv", NAMES)


# ------------------------------------------------------------------------------------------ ramp files

def test_write_ramp_csv_round_trip(tmp_path):
    path = tmp_path / "ramp.csv"
    write_ramp_csv(path, NAMES, duration=2.0, n_rows=5)
    s = load_excitation_csv(path, NAMES)
    np.testing.assert_array_equal(s.times, [0.0, 0.5, 1.0, 1.5, 2.0])
    np.testing.assert_array_equal(s.values, np.repeat([[0.0], [0.25], [0.5], [0.75], [1.0]], 4, axis=1))
    assert s.n_out_of_range == 0


@pytest.mark.parametrize("duration, n_rows", [(0.0, 5), (-1.0, 5), (math.inf, 5), (1.0, 1)])
def test_write_ramp_csv_rejects_bad_arguments(tmp_path, duration, n_rows):
    with pytest.raises(ValueError):
        write_ramp_csv(tmp_path / "r.csv", NAMES, duration, n_rows)


def test_shipped_example_is_the_documented_ramp(tmp_path):
    model = json.loads(resources.files("sim.data").joinpath("das3_model.json").read_text())
    names = [m["name"] for m in model["muscles"]]
    assert len(names) == 138
    expected = tmp_path / "ramp.csv"
    write_ramp_csv(expected, names, duration=0.5, n_rows=11)
    shipped = REPO / "examples" / "ramp.csv"
    assert shipped.read_bytes() == expected.read_bytes()
    s = load_excitation_csv(shipped, names)
    assert s.values.shape == (11, 138)
    np.testing.assert_allclose(s.values[:, 0], s.times / 0.5)
