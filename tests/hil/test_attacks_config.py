"""Attacks on the service config and its files: include merging, ``check-config --show``, non-UTF-8
files, unbounded durations. Every input error must be one red line on stderr and exit code 2."""
import random
import tomllib

import pytest
from helpers import CONFIGS, assert_one_error_line, hil_process
from typer.testing import CliRunner

from hil.cli import app
from hil.config import MAX_RUN_DURATION_S, load_service_config

runner = CliRunner()
REPO = CONFIGS.parent
LATIN1 = "# caf\xe9 from an old editor\n".encode("latin-1")


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def assert_one_red_line(result, *words):
    """Exit 2, exactly one non-empty stderr line, starting with 'Error:' and holding every word."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, (result.exit_code, result.output, result.exception)
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.stderr
    assert "Traceback" not in result.output
    for word in words:
        assert word in lines[0], lines[0]


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- 1. includes merge key by key ------------------------------------------------------------------

def test_include_overriding_one_safety_key_keeps_the_others(tmp_path):
    write(tmp_path / "base.toml", '[safety]\ngh_action = "stop"\nrom_action = "zero"\nwatchdog_timeout_ms = 500\n')
    cfg = load_service_config(write(tmp_path / "top.toml",
                                    'include = ["base.toml"]\n[safety]\nwatchdog_timeout_ms = 300\n'))
    assert cfg.safety.watchdog_timeout_s == pytest.approx(0.3)
    assert cfg.safety.gh_action == "stop" and cfg.safety.rom_action == "zero"


def test_later_include_overrides_an_earlier_one_key_by_key(tmp_path):
    write(tmp_path / "a.toml", '[loop]\nperiod_ms = 2\nsubsteps = 2\n[safety]\ngh_action = "zero"\n')
    write(tmp_path / "b.toml", '[loop]\nsubsteps = 1\n[safety]\nwatchdog_timeout_ms = 300\n')
    cfg = load_service_config(write(tmp_path / "top.toml", 'include = ["a.toml", "b.toml"]\n'))
    assert (cfg.loop.period_s, cfg.loop.substeps) == (pytest.approx(0.002), 1)
    assert cfg.safety.gh_action == "zero" and cfg.safety.watchdog_timeout_s == pytest.approx(0.3)


def test_an_including_files_array_of_tables_replaces_the_included_one(config_over):
    """[[driver]] and [[stimulation.channel]]: the including file's array, whole (never appended)."""
    cfg = load_service_config(config_over("elbow-hold.toml", """
        [[stimulation.channel]]
        name = "biceps"
        muscles = { bicl = 1.0 }
        [[stimulation.channel]]
        name = "triceps"
        muscles = { triclong = 1.0 }
        [[driver]]
        type = "loopback"
        controller = "elbow_hold"
        flexor_channel = 1
        extensor_channel = 2
        """))
    assert [c["name"] for c in cfg.stimulation["channel"]] == ["biceps", "triceps"]
    assert cfg.stimulation["mode"] == "channels"            # from the include: [stimulation] merged
    assert cfg.drivers == [{"type": "loopback", "controller": "elbow_hold", "flexor_channel": 1,
                            "extensor_channel": 2}]


def test_included_relative_file_names_stay_relative_to_the_included_file_after_a_merge(tmp_path):
    write(tmp_path / "sub" / "base.toml", '[plant]\ninitial = "state.json"\n')
    cfg = load_service_config(write(tmp_path / "top.toml",
                                    'include = ["sub/base.toml"]\n[plant]\nscheme = "paper"\n'))
    assert cfg.plant.initial == str(tmp_path / "sub" / "state.json") and cfg.plant.scheme == "paper"


# -- 2. check-config --show ------------------------------------------------------------------------

def test_check_config_show_prints_the_effective_config_that_tomllib_reads_back(config_over, tmp_path):
    top = config_over("elbow-hold.toml", """
        [safety]
        watchdog_timeout_ms = 300
        [recording]
        directory = "runs/ü \\"quoted\\" dir"
        """)
    result = invoke("check-config", top, "--show")
    assert result.exit_code == 0, result.output
    merged = load_service_config(top).raw
    assert tomllib.loads(result.stdout) == merged
    assert merged["safety"]["watchdog_timeout_ms"] == 300 and merged["safety"]["gh_action"] == "monitor"
    assert "OK" not in result.stdout and f"{top}: OK" in result.stderr
    eff = write(tmp_path / "elsewhere" / "eff.toml", result.stdout)     # a usable file, wherever it goes
    again = invoke("check-config", eff)
    assert again.exit_code == 0 and "OK" in again.stdout, again.output
    assert load_service_config(eff).raw == merged


# -- 3a. non-UTF-8 files: one red line -------------------------------------------------------------

@pytest.mark.parametrize("where", ["top", "included"])
def test_non_utf8_service_config_is_one_red_line(tmp_path, where):
    inc = tmp_path / "inc.toml"
    inc.write_bytes(b"[loop]\nperiod_ms = 4\n" + (LATIN1 if where == "included" else b""))
    top = tmp_path / "top.toml"
    top.write_bytes(b'include = ["inc.toml"]\n' + (LATIN1 if where == "top" else b""))
    bad = top if where == "top" else inc
    assert_one_red_line(invoke("check-config", top), str(bad), "not UTF-8 text", "byte 0xe9 on line")


def test_non_utf8_model_config_is_one_red_line(tmp_path):
    model = tmp_path / "model.toml"
    model.write_bytes(b"[model]\n" + LATIN1)
    result = invoke("simulate", "--excitations", CONFIGS.parent / "examples" / "ramp.csv", "--duration", "0.008",
                    "--step", "0.004", "--model-config", model, "--out", tmp_path / "out.csv")
    assert_one_red_line(result, str(model), "not UTF-8 text", "line 2")


def test_non_utf8_playback_csv_is_one_red_line(config_over, tmp_path):
    csv = tmp_path / "sched.csv"
    csv.write_bytes(b"time,bicl\n0,0.1\n" + LATIN1)
    cfg = config_over("loopback.toml", f'[[driver]]\ntype = "loopback"\nfile = "{csv}"\ndirect = true\n')
    assert_one_red_line(invoke("check-config", cfg), str(csv), "not UTF-8 text", "line 3")


@pytest.mark.parametrize("name", ["state.json", "state.csv"])
def test_non_utf8_state_file_is_one_red_line(config_over, tmp_path, name):
    state = tmp_path / name
    state.write_bytes(LATIN1)
    cfg = config_over("loopback.toml", f'[plant]\ninitial = "{state}"\n')
    assert_one_red_line(invoke("check-config", cfg), str(state), "not UTF-8 text", "line 1")


# -- 3b. --duration is bounded ---------------------------------------------------------------------

def test_run_duration_beyond_a_month_is_one_red_line(config_over):
    cfg = config_over("loopback.toml", "[metrics]\nenabled = false\n[recording]\nenabled = false\n")
    assert_one_red_line(invoke("run", "--config", cfg, "--duration", "1e308"), "--duration", "30 days")


def test_ticks_for_rejects_a_duration_beyond_a_month():
    from hil.service.build import ticks_for
    assert ticks_for(MAX_RUN_DURATION_S, 0.001) == 2_592_000_000
    for duration in (1e308, MAX_RUN_DURATION_S * 1.001):
        with pytest.raises(ValueError, match="30 days"):
            ticks_for(duration, 0.004)


# -- 3c. durations in driver tables are bounded ----------------------------------------------------

@pytest.mark.parametrize("value", ["1e300", "61"])
def test_huge_can_counter_reset_is_a_config_error(config_over, value):
    group = f"ff11::fe5:{random.randint(1, 0xFFFF):x}"      # host-local (drivers.can.local_bus)
    cfg = config_over("can.toml", f"""
        [metrics]
        enabled = false
        [[driver]]
        type = "can"
        channel = "{group}"
        dbc = "{CONFIGS / 'fes-hil.dbc'}"
        counter_reset_s = {value}
        """)
    assert_one_red_line(invoke("check-config", cfg), "driver[0].counter_reset_s", "(0, 60]")


@pytest.mark.parametrize("value", ["1e300", "60001"])
def test_huge_serial_client_timeout_is_a_config_error(config_over, value):
    cfg = config_over("serial.toml", f"""
        [[driver]]
        type = "sciencemode2"
        sensor_port = "none"
        client_timeout_ms = {value}
        """)
    assert_one_red_line(invoke("check-config", cfg), "driver[0].client_timeout_ms", "[2000, 60000]")


# -- 4. no input file hangs a command or exhausts its memory ---------------------------------------
# Run as a process with a bounded address space and a timeout: a command that builds a huge object
# fails (MemoryError) instead of filling the machine, and one that hangs fails the test instead of the suite.

@pytest.fixture
def fifo(tmp_path):
    import os
    path = tmp_path / "pipe.toml"
    os.mkfifo(path)
    return path


def test_a_device_as_the_config_is_one_line():
    assert_one_error_line(*hil_process("check-config", "/dev/zero"), "/dev/zero", "not a regular file")


def test_a_fifo_as_the_config_or_an_include_is_one_line(tmp_path, fifo):
    assert_one_error_line(*hil_process("check-config", fifo), str(fifo), "not a regular file")
    top = write(tmp_path / "top.toml", f'include = ["{fifo}"]\n')
    assert_one_error_line(*hil_process("check-config", top), str(fifo), "not a regular file")


def test_an_oversized_config_is_refused_unread(tmp_path):
    from sim.input_file import MAX_TEXT_FILE_BYTES
    big = tmp_path / "big.toml"
    with open(big, "wb") as fh:
        fh.truncate(MAX_TEXT_FILE_BYTES + 1)          # sparse: no disk, and never read
    assert_one_error_line(*hil_process("check-config", big), str(big), f"at most {MAX_TEXT_FILE_BYTES}")


def test_an_include_fan_out_is_refused_at_once(tmp_path):
    """8 files, each including the next 10 times: 10^7 includes unless the tree is bounded."""
    for i in range(1, 8):
        write(tmp_path / f"f{i}.toml", "include = [" + ", ".join([f'"f{i + 1}.toml"'] * 10) + "]\n")
    write(tmp_path / "f8.toml", "[loop]\nperiod_ms = 4\n")
    assert_one_error_line(*hil_process("check-config", tmp_path / "f1.toml"), "include", "f1.toml",
                          "more than 64 included files")


def test_a_shared_include_is_merged_unchanged_wherever_it_is_listed(tmp_path):
    """A diamond (two includes of one common file, read once) is not a cycle, and what one includer sets over
    the common file does not leak into the other's copy of it."""
    write(tmp_path / "common.toml", "[loop]\nperiod_ms = 2\n")
    write(tmp_path / "a.toml", 'include = ["common.toml"]\n[loop]\nperiod_ms = 5\n[safety]\ngh_action = "zero"\n')
    write(tmp_path / "b.toml", 'include = ["common.toml"]\n[loop]\nsubsteps = 2\n')
    cfg = load_service_config(write(tmp_path / "top.toml", 'include = ["a.toml", "b.toml"]\n'))
    assert (cfg.loop.period_s, cfg.loop.substeps, cfg.safety.gh_action) == (pytest.approx(0.002), 2, "zero")


def test_an_include_cycle_names_the_cycle(tmp_path):
    write(tmp_path / "a.toml", 'include = ["b.toml"]\n')
    write(tmp_path / "b.toml", 'include = ["a.toml"]\n')
    code, err = hil_process("check-config", tmp_path / "a.toml")
    assert_one_error_line(code, err, "includes itself", "a.toml -> b.toml -> a.toml")


@pytest.mark.parametrize("initial", ["/dev/zero", "fifo"])
@pytest.mark.parametrize("command", ["check-config", "run --offline"])
def test_a_device_or_fifo_as_the_initial_state_is_one_line(config_over, fifo, initial, command):
    name = str(fifo) if initial == "fifo" else initial
    cfg = config_over("elbow-hold.toml", f'[plant]\ninitial = "{name}"\n[metrics]\nenabled = false\n'
                                         '[recording]\nenabled = false\n')
    args = ["check-config", cfg] if command == "check-config" else ["run", "--config", cfg, "--offline",
                                                                      "--duration", "0.1"]
    assert_one_error_line(*hil_process(*args), name, "not a regular file")


def test_an_oversized_initial_state_is_refused_unread(config_over, tmp_path):
    from sim.input_file import MAX_TEXT_FILE_BYTES
    big = tmp_path / "state.json"
    with open(big, "wb") as fh:
        fh.truncate(MAX_TEXT_FILE_BYTES + 1)
    cfg = config_over("elbow-hold.toml", f'[plant]\ninitial = "{big}"\n')
    assert_one_error_line(*hil_process("check-config", cfg), str(big), f"at most {MAX_TEXT_FILE_BYTES}")


def test_a_fifo_as_the_mtg_parameter_file_is_one_line(config_over, fifo):
    """The files the lower layers read are read the same bounded way (sim.input_file)."""
    cfg = config_over("elbow-hold-mtg.toml", f'[plant]\nmtg_parameters = "{fifo}"\n')
    assert_one_error_line(*hil_process("check-config", cfg), str(fifo), "not a regular file")


@pytest.mark.parametrize("option", ["--excitations", "--model-config", "--initial"])
def test_a_fifo_as_an_input_file_of_hil_simulate_is_one_line(tmp_path, fifo, option):
    excitations = REPO / "examples" / "elbow_flexion.csv"
    args = {"--excitations": [option, fifo], "--model-config": ["-e", excitations, option, fifo],
            "--initial": ["-e", excitations, option, fifo]}[option]
    assert_one_error_line(*hil_process("simulate", *args, "--duration", "0.01", "--step", "0.005",
                                      "--out", tmp_path / "out.csv"), str(fifo),
                          "not a regular file")


@pytest.mark.parametrize("which", ["fifo", "device"])
def test_a_fifo_or_device_as_the_csv_motion_of_hil_fit_mtg_is_one_line(tmp_path, fifo, which):
    """``hil fit mtg --motion`` of a CSV read the file unbounded: /dev/zero hung it (found by a hostile pass over the
    CLI); it is now read the bounded way, like the .mot/.trc/.c3d readers."""
    motion = fifo if which == "fifo" else "/dev/zero"
    assert_one_error_line(*hil_process("fit", "mtg", "--motion", motion, "--amax", "1", "--tmax-pe", "1",
                                       "--out", tmp_path / "fit"), str(motion), "not a regular file")
