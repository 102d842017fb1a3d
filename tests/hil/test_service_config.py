"""Service configuration loading (hil.config): defaults, units, includes and precise errors."""
import math
from pathlib import Path

import pytest

from hil.config import load_service_config
from sim.das3.config import ConfigError


def write(tmp_path, text, name="svc.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_defaults_and_units(tmp_path):
    cfg = load_service_config(write(tmp_path, '[loop]\nperiod_ms = 2\nsubsteps = 2\n'
                                              '[safety]\nwatchdog_timeout_ms = 250\nrom_margin_deg = 10\n'
                                              '[sensor]\ndelay_ms = 4\nangle_noise_deg = 0.5\n'
                                              '[[driver]]\ntype = "loopback"\n'))
    assert cfg.loop.period_s == 0.002 and cfg.loop.substeps == 2
    assert cfg.safety.watchdog_timeout_s == 0.25 and cfg.safety.rom_margin_rad == pytest.approx(math.radians(10))
    assert cfg.sensor.delay_ticks == 2 and cfg.sensor.angle_noise_rad == pytest.approx(math.radians(0.5))
    assert cfg.metrics.port == 9108 and cfg.metrics.host == "127.0.0.1"
    assert cfg.plant.scheme == "activation" and cfg.model.hand_weight is False
    assert cfg.drivers == [{"type": "loopback"}]


def test_include_merges_tables_and_own_tables_win(tmp_path):
    write(tmp_path, '[loop]\nperiod_ms = 5\n[metrics]\nport = 9200\n', "base.toml")
    cfg = load_service_config(write(tmp_path, 'include = ["base.toml"]\n[loop]\nperiod_ms = 1\n'))
    assert cfg.loop.period_s == 0.001 and cfg.metrics.port == 9200


@pytest.mark.parametrize("text, key, words", [
    ("[loop]\nperiod_ms = 20\n", "loop.period_ms", "[1, 10]"),
    ("[loop]\nperiod_ms = 10\nsubsteps = 1\n", "loop.substeps", "6 ms"),
    ("[loop]\nperod_ms = 4\n", "loop.perod_ms", "did you mean 'period_ms'"),
    ("[lop]\n", "lop", "unknown table"),
    ("[safety]\ngh_action = \"panic\"\n", "safety.gh_action", "monitor, zero, stop"),
    ("[safety]\nwatchdog_timeout_ms = \"soon\"\n", "safety.watchdog_timeout_ms", "number"),
    ("[plant]\nscheme = \"euler\"\n", "plant.scheme", "activation, paper"),
    ("[model]\nhand_weight = 1\n", "model.hand_weight", "true or false"),
    ("[model.strength]\nbicep = 0.5\n", "model.strength", "unknown muscle element or group 'bicep'"),
    ("[metrics]\nport = 70000\n", "metrics.port", "integer"),
    ("[[driver]]\ncontroller = \"x\"\n", "driver[0].type", "missing 'type'"),
    ("[sensor]\nangle_noise_deg = nan\n", "sensor.angle_noise_deg", "finite"),
    ("[sensor]\ndelay_ms = -1\n", "sensor.delay_ms", "[0, 1000]"),
    ("[recording]\nenabled = \"yes\"\n", "recording.enabled", "true or false"),
    ("[recording]\ndirectory = 5\n", "recording.directory", "string"),
    ("[metrics]\nhost = 5\n", "metrics.host", "string"),
    ("[[driver]]\ntype = \"warp\"\n", "driver[0].type", "available: can, loopback"),
])
def test_errors_name_file_key_and_reason(tmp_path, text, key, words):
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_service_config(path)
    assert err.value.key == key
    assert str(path) in str(err.value) and words in str(err.value)


def test_relative_file_names_in_an_included_file_are_relative_to_that_file(config_over):
    """configs/loopback.toml and can.toml included from elsewhere still find their CSV and DBC."""
    from helpers import CONFIGS

    from hil.service.build import build_engine
    cfg = load_service_config(config_over("loopback.toml"))
    assert cfg.drivers[0]["file"] == str(CONFIGS / "../examples/elbow_flexion.csv")
    build_engine(cfg)                                    # the playback CSV is found and loaded
    can_cfg = load_service_config(config_over("can.toml", name="c.toml"))
    assert can_cfg.drivers[0]["dbc"] == str(CONFIGS / "fes-hil.dbc")


def test_a_missing_include_names_the_including_file(tmp_path):
    path = write(tmp_path, 'include = ["loopbak.toml"]\n')
    with pytest.raises(ConfigError) as err:
        load_service_config(path)
    assert err.value.key == "include" and err.value.file == str(path) and "loopbak.toml not found" in str(err.value)


def test_unreadable_and_corrupt_files(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_service_config(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_service_config(write(tmp_path, "[loop\nperiod_ms = 4\n"))


ELBOW = 'controller = "elbow_hold"\nflexor_channel = 4\nextensor_channel = 5\n'


@pytest.mark.parametrize("driver, key, words", [
    (ELBOW + "target_degs = 45\n", "driver[0].target_degs", "did you mean 'target_deg'"),
    ('controller = "elbow_hold"\nflexor_chanel = 4\nextensor_channel = 5\n', "driver[0].flexor_channel",
     "is required (found 'flexor_chanel')"),
    (ELBOW.replace("= 5", "= 9"), "driver[0].extensor_channel", "integer in [1, 8]"),
    (ELBOW.replace("= 5", "= 4"), "driver[0].extensor_channel", "differ"),
    (ELBOW + 'target_deg = "ninety"\n', "driver[0].target_deg", "must be a number"),
    (ELBOW + "rate_hz = 500\n", "driver[0].rate_hz", "one command set a tick"),
    (ELBOW + "max_amplitude_ma = 0\n", "driver[0].max_amplitude_ma", "(0, 200]"),
    ('controller = "pid"\n', "driver[0].controller", "playback, elbow_hold"),
    ('controller = "playback"\n', "driver[0].file", "is required"),
    ('file = "nowhere.csv"\n', "driver[0].file", "not found"),
    ('file = "sched.csv"\ndirect = true\n', "driver[0].direct", "mode = \"direct\""),
    ('file = "modes.csv"\n', None, "1.5 at time 1 s is not a pulse mode"),
])
def test_loopback_controller_errors_name_the_key(tmp_path, driver, key, words):
    """A typo in a controller table is an error, never a silently used default."""
    from hil.service.build import build_engine
    (tmp_path / "sched.csv").write_text("time,ch1_amp_ma\n0,10\n")
    (tmp_path / "modes.csv").write_text("time,ch4_amp_ma,ch4_mode\n0,10,0\n1,20,1.5\n")
    root = Path(__file__).resolve().parents[2]
    path = write(tmp_path, f'include = ["{root / "configs" / "loopback.toml"}", '
                           f'"{root / "configs" / "stimulation-default.toml"}"]\n'
                           f'[[driver]]\ntype = "loopback"\n{driver}')
    with pytest.raises(ValueError) as err:      # ConfigError; ExcitationFileError (key None) for the CSV
        build_engine(load_service_config(path))
    where = str(path) if key else str(tmp_path / "modes.csv")
    assert getattr(err.value, "key", None) == key and where in str(err.value) and words in str(err.value), str(err.value)


def test_loopback_controller_config_is_applied(config_over):
    from hil.service.build import build_engine
    _, _, drivers = build_engine(load_service_config(config_over("elbow-hold.toml")))
    ctl = drivers[0].controller
    assert (ctl.flexor, ctl.extensor) == (4, 5) and ctl.target == pytest.approx(math.radians(90))
    assert drivers[0].every == 5 and ctl.max_amp == 80
