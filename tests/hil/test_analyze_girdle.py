"""``hil analyze static-opt --girdle/--rhythm`` and ``hil analyze criteria``: a held girdle from the command
line, a trajectory or a shoulder rhythm; bad values give one ``Error:`` line and exit 2."""
from __future__ import annotations

import csv
import json

import pytest
from typer.testing import CliRunner

from hil.cli import app

runner = CliRunner()
REST_GIRDLE = "-21.25,7.55,12.76,35.56,-24.94,-17.95"
"""The published rest posture's girdle (das3_equilibrium.json), deg, rounded."""
SHORT_RHOMBOID_GIRDLE = "-25.78,16.04,18.78,35.28,-23.89,-17.95"
"""A girdle whose rhomboid5 path is shorter than its tendon slack plus the shortest valid fibre."""


def invoke(*args):
    return runner.invoke(app, ["analyze", *[str(a) for a in args]])


def one_error_line(result) -> str:
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.output
    return lines[0]


@pytest.mark.parametrize("girdle, message", [
    ("1,2,3", "six finite numbers"),
    ("1,2,3,4,5,nan", "six finite numbers"),
    ("1,2,3,4,5,x", "six numbers"),
])
def test_a_bad_girdle_is_one_error_line(tmp_path, girdle, message):
    line = one_error_line(invoke("static-opt", "--out", tmp_path, "--elevation", 30, f"--girdle={girdle}"))
    assert message in line


def test_girdle_and_rhythm_together_are_refused(tmp_path):
    line = one_error_line(invoke("static-opt", "--out", tmp_path, "--elevation", 30, f"--girdle={REST_GIRDLE}",
                                 "--rhythm", "degroot2001"))
    assert "at most one of --girdle and --rhythm" in line


def test_an_unknown_rhythm_is_refused(tmp_path):
    assert "--rhythm must be one of" in one_error_line(
        invoke("static-opt", "--out", tmp_path, "--elevation", 30, "--rhythm", "inman"))


def test_a_girdle_the_humerus_cannot_be_placed_from_is_refused(tmp_path):
    line = one_error_line(invoke("static-opt", "--out", tmp_path, "--elevation", 0, "--plane", 0,
                                 f"--girdle={REST_GIRDLE}"))
    assert "cannot place the humerus" in line


def test_a_girdle_with_a_path_outside_the_path_model_is_refused(tmp_path):
    line = one_error_line(invoke("static-opt", "--out", tmp_path, "--elevation", 30, "--plane", 0,
                                 f"--girdle={SHORT_RHOMBOID_GIRDLE}"))
    assert "muscle path rhomboid5" in line and "outside the path model" in line


def write_csv(path, header, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_a_trajectory_with_some_girdle_columns_is_refused(tmp_path):
    traj = write_csv(tmp_path / "t.csv", ["elevation_deg", "SCy_deg", "SCz_deg"], [[30, 1, 2]])
    line = one_error_line(invoke("static-opt", "--out", tmp_path, "--trajectory", traj))
    assert "all six girdle columns" in line


def test_a_trajectory_girdle_is_held(tmp_path):
    header = ["elevation_deg", "plane_deg", "SCy_deg", "SCz_deg", "SCx_deg", "ACy_deg", "ACz_deg", "ACx_deg"]
    traj = write_csv(tmp_path / "t.csv", header, [[30, 45, *REST_GIRDLE.split(",")]])
    result = invoke("static-opt", "--out", tmp_path / "out", "--trajectory", traj)
    assert result.exit_code == 0, result.output
    with open(tmp_path / "out" / "trajectory.csv", newline="") as fh:
        row = next(csv.DictReader(fh))
    for name, value in zip(header[2:], REST_GIRDLE.split(",")):
        assert float(row[name]) == pytest.approx(float(value), abs=1e-9)


def test_static_opt_with_a_rhythm_holds_the_fitted_girdle(tmp_path):
    result = invoke("static-opt", "--out", tmp_path, "--elevation", 30, "--plane", 0, "--rhythm",
                    "degroot2001-das3rest")
    assert result.exit_code == 0, result.output
    angles = json.loads((tmp_path / "solution.json").read_text())["joint_angles_deg"]
    assert angles["SCz"] == pytest.approx(22.34, abs=0.01) and angles["ACx"] == pytest.approx(-17.95, abs=0.01)


def test_criteria_writes_the_table_and_the_figure(tmp_path):
    result = invoke("criteria", "--out", tmp_path, "--elevations", "30:30:10")
    assert result.exit_code == 0, result.output
    with open(tmp_path / "criteria.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["criterion"], r["gh_constraint"]) for r in rows] == [
        ("a", "on"), ("b", "on"), ("c", "on"), ("d", "on"), ("b", "off")]
    assert all(r["passed"] == "True" for r in rows)
    png = tmp_path / "criteria.png"
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, message", [
    (("--elevations", "0:30:10"), "strictly between 0 and 180"),
    (("--elevations", "30:10:10"), "STOP >= START"),
    (("--rhythm", "inman"), "--rhythm must be one of"),
    (("--plane", "nan"), "--plane must be"),
])
def test_criteria_bad_options_are_one_error_line(tmp_path, args, message):
    assert message in one_error_line(invoke("criteria", "--out", tmp_path, *args))
