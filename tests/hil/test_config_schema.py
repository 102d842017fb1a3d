"""Config schemas (sim.config_schema): the shipped configs use only declared keys, every key is documented,
the dataclasses' defaults are the schema's (one default per key), and the generated reference lists every key."""
from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from drivers.controllers.loopback import DRIVER_KEYS
from drivers.core.config_table import ConfigTable
from drivers.core.interface import DRIVERS, DriverContext
from drivers.stimulators.p24.driver import CONFIG_SCHEMA as P24_SCHEMA
from drivers.stimulators.p24.driver import P24Driver
from drivers.stimulators.rehastim2.driver import CONFIG_SCHEMA as SM2_SCHEMA
from drivers.stimulators.rehastim2.driver import ScienceModeDriver
from hil.config import MetricsConfig, RecordingConfig, load_service_config
from hil.config_reference import config_reference_markdown, config_sections, driver_sections
from hil.rt.loop import LoopConfig
from hil.rt.sensor import SensorModelConfig
from hil.rt.stimulation import CHANNEL_SCHEMA, ChannelConfig, load_stimulation_config
from sim.config_schema import REQUIRED, Derived, Key, Section, from_ms
from sim.das3.config import ConfigError, ModelConfig
from sim.das3.model import muscle_element_names

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted([*ROOT.glob("configs/*.toml"), *ROOT.glob("examples/**/*.toml")])
UNSCHEMAED = {"driver", "include"}    # [[driver]] tables: see used_driver_keys


def schema_keys() -> dict[str, set[str]]:
    """Table name (as in the file) -> its declared keys."""
    keys: dict[str, set[str]] = {}
    for section in config_sections():
        keys.setdefault(section.name.split(" ")[0], set()).update(k.name for k in section.keys)
    return keys


def used_keys(path: Path) -> list[str]:
    """Every 'table.key' a shipped file sets outside [[driver]] (a sweep file: the paths it sweeps)."""
    doc = tomllib.loads(path.read_text())
    if "base" in doc:
        return [p for part in ("grid", "random") for p in doc.get(part, {})
                if "." in p and p.split(".")[0] not in UNSCHEMAED]
    found = []
    for table, values in doc.items():
        if table in UNSCHEMAED:
            continue
        found += [f"{table}.{key}" for key in values]
        for channel in values.get("channel", []) if table == "stimulation" else []:
            found += [f"stimulation.channel.{key}" for key in channel]
    return found


def used_driver_keys(path: Path) -> list[str]:
    """Every key a shipped ``[[driver]]`` table sets, as 'driver (type).key' or 'driver.sub (type).key' (a
    sub-table's keys); a loopback table's other keys are its controller's parameters, checked by the controller."""
    found = []
    for table in tomllib.loads(path.read_text()).get("driver", []):
        kind = table["type"]
        for key, value in table.items():
            if kind == "loopback" and key not in DRIVER_KEYS:
                continue
            found.append(f"driver ({kind}).{key}")
            if isinstance(value, dict):
                found += [f"driver.{key} ({kind}).{sub}" for sub in value]
    return found


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_key_of_a_shipped_driver_table_is_in_its_drivers_schema(path):
    declared = {s.name: {k.name for k in s.keys} for s in driver_sections()}
    missing = [u for u in used_driver_keys(path) if u.rsplit(".", 1)[1] not in declared.get(u.rsplit(".", 1)[0], ())]
    assert missing == []


def test_every_built_in_driver_declares_its_table_and_the_shipped_driver_tables_are_seen():
    names = {s.name for s in driver_sections()}
    assert {f"driver ({name})" for name in DRIVERS} <= names
    assert {"driver.bus (can)", "driver.inlet (lsl)"} <= names
    used = {u for path in SHIPPED for u in used_driver_keys(path)}
    assert {"driver (can).counter_reset_s", "driver (lsl).arm_every", "driver.inlet (lsl).type",
            "driver (sciencemode2).channel_map", "driver (sciencemode4).device_id", "driver (loopback).rate_hz"} <= used


def test_a_stimulator_table_with_only_its_type_gets_the_schemas_defaults():
    """One default per key: what parse_config fills in for a missing key is the schema's default (in SI)."""
    ctx = DriverContext(index=0, file=None, base_dir=str(ROOT), period_s=0.004, dof_names=(), muscle_names=(),
                        group_names=(), channel_names=tuple(f"ch{n}" for n in range(1, 9)), frame_dtype=None)
    for driver, schema in ((P24Driver, P24_SCHEMA), (ScienceModeDriver, SM2_SCHEMA)):
        args = driver.parse_config({"type": driver.name}, ctx).endpoint_args
        assert args["channel_map"] == [n - 1 for n in schema.key("channel_map").default]
        for key in schema.keys:
            if key.name in ("channel_map", "min_frequency_hz"):
                continue
            if key.name in args:
                assert args[key.name] == key.si_default, (driver.name, key.name)
            elif key.field in args:
                assert args[key.field] == key.si_default, (driver.name, key.name)
    p24 = P24Driver.parse_config({"type": "sciencemode4"}, ctx).endpoint_args
    assert p24["min_frequency_hz"] == (P24_SCHEMA.key("min_frequency_hz").default,) * 8
    assert p24["electrode_faults"] == {} and p24["device_id"] == "EMUP24-001"


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_key_of_a_shipped_config_is_in_the_schema(path):
    keys = schema_keys()
    used = [_group_key(u) for u in used_keys(path)]
    missing = [u for u in used if u.rsplit(".", 1)[1] not in keys.get(u.rsplit(".", 1)[0], set())]
    assert missing == []


def _group_key(used: str) -> str:
    """'patient.groups.bicb.strength' -> 'patient.groups.<group>.strength' (the table the schema names)."""
    parts = used.split(".")
    return ".".join(["patient", "groups", "<group>", *parts[3:]]) if parts[:2] == ["patient", "groups"] else used


def test_the_shipped_configs_are_seen():
    """The walk above reads tables, channels and sweep paths (an empty walk would pass anything)."""
    used = {u for path in SHIPPED for u in used_keys(path)}
    assert {"loop.period_ms", "stimulation.channel.muscles", "sensor.angle_noise_deg", "model.muscle_model"} <= used


def test_every_schema_key_has_a_doc():
    for section in config_sections():
        assert section.doc, section.name
        for key in section.keys:
            assert key.doc.strip(), f"{section.name}.{key.name} has no doc"


def test_an_empty_config_gives_the_dataclass_defaults(tmp_path):
    """One default per key: what the parser fills in for a missing key is the dataclass's default."""
    path = tmp_path / "empty.toml"
    path.write_text("")
    cfg = load_service_config(path)
    assert cfg.loop == LoopConfig()
    assert cfg.sensor == SensorModelConfig()
    assert cfg.metrics == MetricsConfig()
    assert cfg.recording == RecordingConfig()
    assert cfg.model == ModelConfig()


def test_a_channel_with_only_its_muscles_gets_the_dataclass_defaults():
    table = {"channel": [{"muscles": {"bicl": 1.0}}]}
    parsed = load_stimulation_config(table, muscle_element_names()).channels[0]
    assert parsed == ChannelConfig(name="ch1", gains={"bicl": 1.0})


def test_the_reference_lists_every_key_of_every_table():
    text = config_reference_markdown()
    for section in config_sections():
        assert f"[{section.name}]" in text
        for key in section.keys:
            assert f"| `{key.name}` |" in text, f"{section.name}.{key.name}"
    assert "| `period_ms` | ms | `4` | [1, 10] |" in text
    assert "`[[stimulation.channel]]`" in text


def test_a_table_is_read_by_its_schema_in_si_with_derived_defaults_and_the_same_errors():
    section = Section("demo", "A demo table.", (
        Key("timeout_ms", "number", 500.0, "a timeout", lo=1.0, hi=1000.0, field="timeout_s", to_si=from_ms),
        Key("stall_ms", "number", Derived("2 x timeout_ms", lambda read: 2 * read["timeout_ms"]), "a stall",
            lo=0.0, hi=5000.0, field="stall_s", to_si=from_ms),
        Key("name", "string", REQUIRED, "a name"),
    ))
    assert ConfigTable({"timeout_ms": 100.0, "name": "x"}, "demo", None).read(section) == {
        "timeout_s": 0.1, "stall_s": 0.2, "name": "x"}
    with pytest.raises(ConfigError, match=r"key 'demo.timeout_ms': must be a finite number in \[1, 1000\], not 0"):
        ConfigTable({"timeout_ms": 0, "name": "x"}, "demo", None).read(section)
    with pytest.raises(ConfigError, match=r"key 'demo.name': is required \(found 'nmae'\)"):
        ConfigTable({"nmae": "x"}, "demo", None).read(section)
    with pytest.raises(ConfigError, match=r"unknown key 'extra'"):
        ConfigTable({"name": "x", "extra": 1}, "demo", None).build(section, dict)


def test_a_key_of_an_unknown_kind_or_a_section_with_a_repeated_key_is_refused():
    with pytest.raises(ValueError, match="unknown kind"):
        Key("x", "float", 1.0, "x")
    with pytest.raises(ValueError, match="twice"):
        Section("s", "s", (Key("x", "number", 1.0, "x"), Key("x", "number", 2.0, "x")))


def test_conversions_match_the_parser_bit_for_bit():
    """The schema's conversions are the float operations the parser always used (replays depend on them)."""
    assert from_ms(4.0) == 4.0 / 1000.0 and LoopConfig().period_s == 0.004
    assert ModelConfig().gh_rim_theta == math.radians(44.37)
    assert CHANNEL_SCHEMA.default("threshold_charge_c") == 5.0 * 1e-6
