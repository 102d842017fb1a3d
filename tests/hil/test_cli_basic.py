"""The ``hil`` command line through typer's CliRunner (tests that need the core skip without it)."""
import json
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from hil import __version__
from hil.cli import app
from hil.recording.files import output_columns

runner = CliRunner()
REPO = Path(__file__).resolve().parents[2]
DOFS = ("SCy", "SCz", "SCx", "ACy", "ACz", "ACx", "GHy", "GHz", "GHyy", "ELx", "PSy")


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_help_lists_the_commands():
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("simulate", "model", "bench"):
        assert command in result.output


def test_version_matches_the_package_metadata():
    result = invoke("--version")
    assert result.exit_code == 0 and __version__ in result.output
    with open(REPO / "pyproject.toml", "rb") as fh:
        assert tomllib.load(fh)["project"]["version"] == __version__


@pytest.mark.parametrize("channels", ["0", "17", "100000000"])
def test_can_dbc_takes_one_to_sixteen_channels(channels):
    result = invoke("can", "dbc", "--channels", channels)      # 10^8 channels used to generate until memory ran out
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"--channels must be a whole number from 1 to 16, not {channels}" in " ".join(result.output.split())


@pytest.mark.parametrize("option, value", [("--duration", "0"), ("--duration", "-1"),
                                           ("--step", "nan"), ("--step", "0")])
def test_simulate_rejects_bad_numbers_before_loading_anything(tmp_path, option, value):
    args = {"--duration": "0.1", "--step": "0.004", option: value}
    result = invoke("simulate", "--excitations", REPO / "examples" / "ramp.csv",
                    "--duration", args["--duration"], "--step", args["--step"], "--out", tmp_path / "o.csv")
    assert result.exit_code == 2
    assert option in result.output and "Traceback" not in result.output
    assert not (tmp_path / "o.csv").exists()


def test_model_info_table():
    pytest.importorskip("sim.das3.model")
    result = invoke("model", "info")
    assert result.exit_code == 0, result.output
    for word in ("SCy", "PSy", "deg", "trapscap1", "deltscap1", "67 cross GH"):
        assert word in result.output


def test_model_info_json():
    pytest.importorskip("sim.das3.model")
    result = invoke("model", "info", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["n_states"] == 298
    assert [d["name"] for d in doc["dofs"]] == list(DOFS)
    gh = doc["dofs"][DOFS.index("GHz")]
    assert gh["range_deg"] == pytest.approx(np.degrees(gh["range_rad"]).tolist())
    assert len(doc["muscles"]) == 138
    delt = next(m for m in doc["muscles"] if m["name"] == "deltscap1")
    assert delt["dofs"] == ["GHy", "GHz", "GHyy"] and delt["crosses_gh"] is True
    trap = next(m for m in doc["muscles"] if m["name"] == "trapscap1")
    assert trap["crosses_gh"] is False and "GHy" not in trap["dofs"]
    assert len(doc["muscles_crossing_gh"]) == 67 and "deltscap1" in doc["muscles_crossing_gh"]


def test_simulate_unknown_muscle_exits_2_naming_it(tmp_path):
    pytest.importorskip("sim.das3.plant")
    csv_path = tmp_path / "bad.csv"
    csv_path.write_text("time,trapscap1,deltscapX\n0,0.1,0.2\n")
    result = invoke("simulate", "--excitations", csv_path, "--duration", "0.008", "--step", "0.004",
                    "--out", tmp_path / "out.csv")
    assert result.exit_code == 2
    assert "deltscapX" in result.output and str(csv_path) in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "out.csv").exists()


def test_can_dbc_to_a_missing_directory_or_a_directory_is_one_line(tmp_path):
    for out, words in ((tmp_path / "no" / "x.dbc", "does not exist"), (tmp_path, "is a directory")):
        result = invoke("can", "dbc", "--out", out)     # both used to end in an OSError's traceback
        assert result.exit_code == 2 and words in " ".join(result.output.split()) and "Traceback" not in result.output


def test_an_output_over_an_input_file_is_refused_and_the_input_kept(tmp_path):
    ramp, model_toml, state = tmp_path / "ramp.csv", tmp_path / "model.toml", tmp_path / "state.npz"
    ramp.write_bytes((REPO / "examples" / "ramp.csv").read_bytes())
    model_toml.write_text("[model]\njoint_k1 = 0.0\n")
    state.write_bytes(b"not a state")
    for args in (["simulate", "--excitations", ramp, "--duration", "0.008", "--step", "0.004", "--out", ramp],
                 ["model", "equilibrium", "--model-config", model_toml, "--out", model_toml],
                 ["model", "linearize", "--state", state, "--out", state]):
        result = invoke(*args)
        assert result.exit_code == 2 and "writing it would destroy it" in " ".join(result.output.split()), args
    assert ramp.read_bytes() == (REPO / "examples" / "ramp.csv").read_bytes()
    assert model_toml.read_text() == "[model]\njoint_k1 = 0.0\n" and state.read_bytes() == b"not a state"


def test_simulate_missing_excitation_file_exits_2(tmp_path):
    pytest.importorskip("sim.das3.plant")
    result = invoke("simulate", "--excitations", tmp_path / "none.csv", "--duration", "0.008",
                    "--step", "0.004", "--out", tmp_path / "out.csv")
    assert result.exit_code == 2 and "none.csv" in result.output


def test_simulate_bad_model_config_exits_2(tmp_path):
    pytest.importorskip("sim.das3.plant")
    config = tmp_path / "model.toml"
    config.write_text("[model]\njoint_k1 = -1\n")
    result = invoke("simulate", "--excitations", REPO / "examples" / "ramp.csv", "--duration", "0.008",
                    "--step", "0.004", "--model-config", config, "--out", tmp_path / "out.csv")
    assert result.exit_code == 2 and "joint_k1" in result.output


@pytest.mark.slow
def test_simulate_writes_one_row_per_step(tmp_path):
    pytest.importorskip("sim.das3.plant")
    out = tmp_path / "run.csv"
    result = invoke("simulate", "--excitations", REPO / "examples" / "ramp.csv", "--duration", "0.012",
                    "--step", "0.004", "--out", out)
    assert result.exit_code == 0, result.output
    header = out.read_text().splitlines()[0].split(",")
    assert tuple(header) == output_columns(DOFS)
    data = np.loadtxt(out, delimiter=",", skiprows=1)
    assert data.shape == (4, 39)
    np.testing.assert_allclose(data[:, 0], [0.0, 0.004, 0.008, 0.012], rtol=0, atol=1e-15)
    assert np.all(np.isfinite(data))


def test_model_equilibrium_from_a_rough_posture_finds_the_published_one():
    result = invoke("model", "equilibrium", "--start", "rounded", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["residual_rms"] < 1e-10
    assert doc["max_abs_dq_from_published_deg"] < 1e-6
    assert doc["gh_stability"] == pytest.approx(-0.62, abs=0.01)


def test_model_equilibrium_rejects_an_unknown_start():
    result = invoke("model", "equilibrium", "--start", "sideways")
    assert result.exit_code == 2
    assert "--start" in result.output


def _all_commands(command, path=()):
    """(argv prefix, click command) for every command and group below ``command``."""
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _all_commands(sub, path + (name,))


TOML_NAME = re.compile(r"\[\[?[A-Za-z_][\w.-]*\]\]?")


def test_every_help_text_keeps_its_bracketed_toml_names():
    """Each ``[table]`` a command's or option's help names is in its rendered --help (a markup renderer
    took them for style tags: "base config, and/or .")."""
    import typer.main

    checked = set()
    for path, command in _all_commands(typer.main.get_command(app)):
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        names = {m.group(0) for text in texts for m in TOML_NAME.finditer(text)}
        if not names:
            continue
        result = runner.invoke(app, [*path, "--help"], terminal_width=100)
        assert result.exit_code == 0, result.output
        missing = sorted(n for n in names if n not in result.output)
        assert not missing, (path, missing)
        checked.update((" ".join(path), n) for n in names)
    assert {("sweep", "[grid]"), ("sweep", "[random]"), ("bench loop", "[loop]"), ("fit mtg", "[plant]")} <= checked
