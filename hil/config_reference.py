"""The config reference, generated from the tables' schemas (:mod:`sim.config_schema`): every key of every
table a service config can hold, for the docs site and for tests that hold configs and schemas together."""
from __future__ import annotations

from drivers.core.interface import driver_class, driver_names
from hil.config import METRICS_SCHEMA, RECORDING_SCHEMA, plant_section
from hil.rt.lab_sensors import LAB_SECTIONS
from hil.rt.loop import LOOP_SCHEMA
from hil.rt.sensor import SENSOR_SCHEMA
from hil.rt.stimulation import CHANNEL_SCHEMA, STIMULATION_SCHEMA
from hil.rt.voluntary import ROLE_SCHEMA
from hil.safety.table import section as safety_section
from sim.config_schema import Section, sections_markdown
from sim.das3.config import MODEL_SCHEMA
from sim.patient import GROUP_SCHEMA, PATIENT_SCHEMA, SPASTICITY_SCHEMA
from sim.subject_size import SIZE_SCHEMA

INTRO = """Every table and key a service config (`hil run`, `hil serve`, `hil check-config`) accepts, generated
from the schemas the parser reads with. Units are in the key names (`period_ms`, `rom_margin_deg`) and
converted to SI when read. A key that is not listed is an error (`hil check-config` names the closest one).
`include = ["base.toml", ...]` merges other files' tables under this file's own, key by key; an array of
tables (`[[driver]]`, `[[stimulation.channel]]`) is replaced as a whole.
"""


def driver_sections() -> list[Section]:
    """The ``[[driver]]`` schemas of the drivers that declare one: a ``config_schema`` class attribute holding a
    Section, or a tuple of them (the table, then its sub-tables such as ``driver.bus (can)``)."""
    found = []
    for name in driver_names():
        schema = getattr(driver_class(name), "config_schema", None)
        found += [s for s in (schema if isinstance(schema, tuple) else (schema,)) if isinstance(s, Section)]
    return found


def config_sections() -> tuple[Section, ...]:
    """Every config table's schema, in file order (with the plant types, rules and drivers registered now)."""
    return (LOOP_SCHEMA, plant_section(), MODEL_SCHEMA, PATIENT_SCHEMA, GROUP_SCHEMA, SPASTICITY_SCHEMA, SIZE_SCHEMA,
            STIMULATION_SCHEMA, CHANNEL_SCHEMA,
            safety_section(), SENSOR_SCHEMA, *LAB_SECTIONS.values(), METRICS_SCHEMA, RECORDING_SCHEMA, ROLE_SCHEMA,
            *driver_sections())


def config_reference_markdown(title: str = "Keys by table") -> str:
    """The whole reference as Markdown: an introduction, then under ``## title`` one key table per config table."""
    return INTRO + "\n" + sections_markdown(config_sections(), title=title)
