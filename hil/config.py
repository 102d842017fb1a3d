"""Service/experiment configuration (TOML): loop, plant, model, stimulation, safety, sensors, metrics,
recording and drivers. ``hil check-config FILE`` validates a file with precise errors (file, key,
reason); every run records the validated configuration in its recording header.

Units in the file are labelled in the key names (``period_ms``, ``watchdog_timeout_ms``,
``rom_margin_deg``, ...) and converted to SI / radians when read. Each table is read by its schema
(:mod:`sim.config_schema`), declared by the module that owns it; :mod:`hil.config_reference` lists them all.
"""
from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass, field, replace
from os import PathLike

from drivers.core.config_table import ConfigTable
from drivers.core.interface import driver_names
from hil.patients import read_patient
from hil.rt.loop import LOOP_SCHEMA, LoopConfig
from hil.rt.plants import file_option_names, option_keys, plant_names, plant_type
from hil.rt.sensor import SensorModelConfig, sensor_config
from hil.rt.voluntary import ROLE_KEY, driver_role
from hil.safety.table import SafetyConfig
from hil.safety.table import section as safety_section
from sim.config_schema import Key, Section, from_ms
from sim.das3.config import ConfigError, ModelConfig, model_config_from_table, read_toml_document, unknown_name
from sim.patient import Patient, apply_patient

SCHEMES = ("activation", "paper")
TABLES = ("loop", "plant", "model", "patient", "stimulation", "safety", "sensor", "metrics", "recording", "driver",
          "include")


#: ``[recording] on_failure``: what a run does when its recording fails (either way it exits 5)
RECORDING_FAILURE_ACTIONS = ("stop", "continue")

METRICS_SCHEMA = Section("metrics", "The Prometheus /metrics endpoint of a run.", (
    Key("enabled", "boolean", True, "serve /metrics"),
    Key("host", "string", "127.0.0.1", "address /metrics listens on"),
    Key("port", "integer", 9108, "hil serve: this port or refuse to start; hil run: this port if free, else any; "
        "0: any", lo=0, hi=65535),
    Key("linger_after_stop_ms", "number", 3000.0, "/metrics stays up this long after a safety stop (a scrape "
        "sees it)", lo=0.0, hi=60000.0, field="linger_after_stop_s", to_si=from_ms),
    Key("targets_directory", "string", "runs/prometheus-targets", "where each run writes its Prometheus "
        "file_sd target"),
))

RECORDING_SCHEMA = Section("recording", "The run's recording (header, frames, commands, events).", (
    Key("enabled", "boolean", True, "record the run"),
    Key("directory", "string", "runs", "directory of the recordings"),
    Key("on_failure", "string", "stop", "the recorder died or cannot write: stop the run, or go on unrecorded "
        "(either way the run exits 5)", choices=RECORDING_FAILURE_ACTIONS),
))

#: ``[plant]`` keys every plant type reads (``type`` and each type's own keys: :func:`plant_section`).
PLANT_KEYS = (
    Key("initial", "string", "equilibrium", "initial state: `equilibrium` or a state file (relative to "
        "this config file)"),
    Key("scheme", "string", "activation", "input scheme of the plant", choices=SCHEMES),
)


def plant_section() -> Section:
    """``[plant]``: the common keys, ``type`` (a registered plant type, :mod:`hil.rt.plants`) and every type's
    own keys, each of which needs its type."""
    kinds = "; ".join(f"`{name}`: {plant_type(name).doc}" for name in plant_names())
    own = tuple(replace(key, doc=f"{key.doc}; needs type = \"{owner}\"") for key, owner in option_keys().values())
    return Section("plant", "The simulated arm.", (
        *PLANT_KEYS, Key("type", "string", "das3", f"the plant: {kinds}", choices=plant_names()), *own))


@dataclass(frozen=True)
class MetricsConfig:
    enabled: bool = METRICS_SCHEMA.default("enabled")
    host: str = METRICS_SCHEMA.default("host")
    port: int = METRICS_SCHEMA.default("port")
    linger_after_stop_s: float = METRICS_SCHEMA.default("linger_after_stop_s")
    targets_directory: str = METRICS_SCHEMA.default("targets_directory")


@dataclass(frozen=True)
class RecordingConfig:
    enabled: bool = RECORDING_SCHEMA.default("enabled")
    directory: str = RECORDING_SCHEMA.default("directory")
    on_failure: str = RECORDING_SCHEMA.default("on_failure")


@dataclass(frozen=True)
class PlantConfig:
    initial: str = plant_section().default("initial")
    scheme: str = plant_section().default("scheme")
    type: str = plant_section().default("type")
    options: dict = field(default_factory=dict)     # the type's own keys (hil.rt.plants.PlantType.options)


def plant_config_from_table(merged: dict, path: str) -> PlantConfig:
    """``[plant]``; a key of another plant type than ``type`` set to other than its default is refused."""
    t = ConfigTable.section(merged, "plant", path)
    values = t.read(plant_section())
    t.done()
    kind = plant_type(values["type"])
    own = () if kind.options is None else tuple(k.name for k in kind.options.keys)
    for name, (key, owner) in option_keys().items():
        if name not in own and values[name] != key.default:
            raise ConfigError(f"{name} needs type = \"{owner}\"", file=path, key=f"plant.{name}")
    return PlantConfig(initial=values["initial"], scheme=values["scheme"], type=kind.name,
                       options={name: values[name] for name in own})


@dataclass(frozen=True)
class ServiceConfig:
    path: str
    raw: dict                                  # the merged TOML document (recorded in run headers)
    loop: LoopConfig
    plant: PlantConfig
    model: ModelConfig                         # the patient applied (sim.patient.apply_patient)
    patient: Patient
    stimulation: dict                          # the [stimulation] table, parsed by hil.rt.stimulation
    safety: SafetyConfig
    sensor: SensorModelConfig
    metrics: MetricsConfig
    recording: RecordingConfig
    drivers: list[dict] = field(default_factory=list)

    @property
    def base_dir(self) -> str:
        return os.path.dirname(os.path.abspath(self.path))


def merged_document(path: str | PathLike) -> dict:
    """A config file's document with its includes merged (not validated; :func:`service_config_from_dict`)."""
    return _merged_document(str(path), _IncludeTree())


def with_plant_type(cfg: ServiceConfig, plant_type: str | None) -> ServiceConfig:
    """``cfg`` with ``[plant] type`` replaced (``hil run --plant``), validated again as a whole (the stimulation
    map must then name the plant's actuators); None keeps it."""
    if plant_type is None:
        return cfg
    raw = copy.deepcopy(cfg.raw)
    raw.setdefault("plant", {})["type"] = plant_type
    return service_config_from_dict(raw, cfg.path)


def with_patient(cfg: ServiceConfig, patient: dict | None) -> ServiceConfig:
    """``cfg`` with its ``[patient]`` table replaced by ``patient`` (``hil run --patient``:
    :func:`hil.patients.patient_override`), validated again as a whole; None keeps it."""
    if patient is None:
        return cfg
    raw = copy.deepcopy(cfg.raw)
    raw["patient"] = copy.deepcopy(patient)
    return service_config_from_dict(raw, cfg.path)


@dataclass(frozen=True)
class ConfigOverrides:
    """What ``hil run`` replaces in a config file, applied by every process of a run to the file it loads
    (picklable)."""

    plant_type: str | None = None               # --plant: [plant] type
    patient: dict | None = None                 # --patient: the [patient] table (hil.patients.patient_override)

    def apply(self, cfg: ServiceConfig) -> ServiceConfig:
        return with_patient(with_plant_type(cfg, self.plant_type), self.patient)


def load_service_config(path: str | PathLike) -> ServiceConfig:
    """Read and validate a service/experiment config.

    ``include = ["other.toml", ...]`` (relative to this file) merges the other files' tables under this
    file's own, key by key: a key this file sets wins, the included file's other keys stay (a sub-table
    such as ``[driver.bus]`` or an inline table merges the same way). An array of tables (``[[driver]]``,
    ``[[stimulation.channel]]``) is one value: this file's array replaces the included one as a whole,
    so a file that lists drivers gets exactly those drivers. Includes apply in order, a later one over an
    earlier one by the same rule."""
    path = str(path)
    return service_config_from_dict(_merged_document(path, _IncludeTree()), path)


def _merge_tables(base: dict, over: dict) -> dict:
    """``over`` merged into ``base`` (in place): tables merge key by key, recursively; any other value,
    an array of tables included, replaces the base's."""
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge_tables(base[key], value)
        else:
            base[key] = value
    return base


#: Deepest include nesting and most included files (repeats counted) of one config: an include tree is
#: bounded before it is read, so a fan-out (each file including the next many times) is refused at once.
MAX_INCLUDE_DEPTH = 8
MAX_INCLUDED_FILES = 64


class _IncludeTree:
    """The files of one config's include tree: each read once, the chain being included (for cycles) and
    how many includes were followed."""

    def __init__(self) -> None:
        self.documents: dict[str, dict] = {}
        self.chain: list[str] = []
        self.followed = 0

    def enter(self, path: str, including: str | None) -> None:
        real = os.path.realpath(path)
        if real in self.chain:
            raise ConfigError(f"includes itself ({' -> '.join(map(os.path.basename, [*self.chain, real]))})",
                              file=including, key="include")
        if len(self.chain) > MAX_INCLUDE_DEPTH:
            raise ConfigError(f"includes nested more than {MAX_INCLUDE_DEPTH} levels", file=including, key="include")
        if including is not None:
            self.followed += 1
            if self.followed > MAX_INCLUDED_FILES:
                raise ConfigError(f"the include tree of {os.path.basename(self.chain[0])} has more than "
                                  f"{MAX_INCLUDED_FILES} included files (repeats counted)", file=including,
                                  key="include")
        self.chain.append(real)

    def read(self, path: str) -> dict:
        """A deep copy of the file's document (merging modifies it), read and parsed only the first time."""
        real = os.path.realpath(path)
        if real not in self.documents:
            self.documents[real] = read_toml_document(path)
        return copy.deepcopy(self.documents[real])


def _merged_document(path: str, tree: _IncludeTree, including: str | None = None) -> dict:
    """The file's tables merged over those of its includes (recursively, in order; bounded by ``tree``)."""
    tree.enter(path, including)
    doc = tree.read(path)
    includes = doc.pop("include", [])
    if isinstance(includes, str):
        includes = [includes]
    if not isinstance(includes, list) or not all(isinstance(i, str) for i in includes):
        raise ConfigError("must be a file name or a list of file names", file=path, key="include")
    if including is not None:
        _anchor_relative_paths(doc, os.path.dirname(os.path.abspath(path)))
    merged: dict = {}
    for inc in includes:
        inc_path = inc if os.path.isabs(inc) else os.path.join(os.path.dirname(os.path.abspath(path)), inc)
        if not os.path.exists(inc_path):
            raise ConfigError(f"included file {inc_path} not found", file=path, key="include")
        _merge_tables(merged, _merged_document(inc_path, tree, path))
    tree.chain.pop()
    return _merge_tables(merged, doc)


def _path_keys() -> tuple[tuple[str, str], ...]:
    """File-name keys: (table, key), the plant types' file options included; a relative name means relative to
    the file that sets it."""
    return (("plant", "initial"), *(("plant", k) for k in file_option_names()), ("driver", "file"), ("driver", "dbc"),
            ("driver", "controller"))


def _anchor_relative_paths(doc: dict, base: str) -> None:
    """Make an included file's relative file names absolute, so they keep meaning "relative to this
    file" wherever it is included from (``plant.initial = "equilibrium"`` and ``plant.mtg_parameters =
    "default"`` are not files)."""
    for table, key in _path_keys():
        entries = doc.get(table)
        for entry in entries if isinstance(entries, list) else [entries]:
            value = entry.get(key) if isinstance(entry, dict) else None
            if _relative_file_name(key, value):
                entry[key] = os.path.join(base, value)


def _relative_file_name(key: str, value) -> bool:
    """Whether a path key's value is a relative file name: not ``equilibrium`` or ``default``, and for
    ``controller`` only the ``file.py:Class`` form (``module:Class`` and entry-point names are not files)."""
    if not isinstance(value, str) or not value or os.path.isabs(value):
        return False
    return ".py:" in value if key == "controller" else value not in ("equilibrium", "default")


#: Longest run ``hil run --duration`` accepts, s: a month is the longest a lab service plausibly runs
#: between restarts, and the bound keeps tick counts (duration / period) far inside int64.
MAX_RUN_DURATION_S = 30 * 24 * 3600.0

#: Longest plant step the service accepts (the Rosenbrock scheme's tested range, README "Accuracy").
MAX_PLANT_STEP_S = 0.006

def min_substeps(period_s: float) -> int:
    """Fewest plant sub-steps per tick that keep the step within MAX_PLANT_STEP_S."""
    return max(1, math.ceil(period_s / MAX_PLANT_STEP_S - 1e-9))


def service_config_from_dict(merged: dict, path: str) -> ServiceConfig:
    """Validate an already merged config document (e.g. the one recorded in a run's header)."""
    for key in merged:
        if key not in TABLES:
            raise ConfigError(unknown_name("table", key, TABLES), file=path, key=key)

    loop = ConfigTable.section(merged, "loop", path).build(LOOP_SCHEMA, LoopConfig)
    period, substeps = loop.period_s, loop.substeps
    step = period / substeps
    if substeps < min_substeps(period):
        raise ConfigError(f"plant step period/substeps = {step * 1e3:g} ms exceeds {MAX_PLANT_STEP_S * 1e3:g} ms, "
                          "beyond the Rosenbrock scheme's tested range; raise substeps", file=path,
                          key="loop.substeps")

    plant = plant_config_from_table(merged, path)
    kind = plant_type(plant.type)
    model = model_config_from_table(merged.get("model", {}), file=path, prefix="model.")
    refused = None if kind.check is None else kind.check(plant, model)
    if refused is not None:
        raise ConfigError(refused[1], file=path, key=refused[0])
    patient, patient_table = read_patient(merged.get("patient"), path)
    model = patient_model(kind, plant, model, patient, path)
    if patient_table is not None:
        merged = {**merged, "patient": patient_table}

    safety = ConfigTable.section(merged, "safety", path).build(safety_section(), SafetyConfig)
    if not kind.has_glenohumeral and safety.gh_action != "monitor":
        raise ConfigError(f"the {kind.name} plant has no glenohumeral model (its GH stability is NaN): gh_action "
                          "must be \"monitor\"", file=path, key="safety.gh_action")

    sensor = sensor_config(merged, path, period)
    metrics = ConfigTable.section(merged, "metrics", path).build(METRICS_SCHEMA, MetricsConfig)
    recording = ConfigTable.section(merged, "recording", path).build(RECORDING_SCHEMA, RecordingConfig)

    drivers = merged.get("driver", [])
    if not isinstance(drivers, list) or not all(isinstance(d, dict) for d in drivers):
        raise ConfigError("must be an array of tables ([[driver]])", file=path, key="driver")
    for i, d in enumerate(drivers):
        if not isinstance(d.get("type"), str):
            raise ConfigError("missing 'type' (e.g. \"loopback\")", file=path, key=f"driver[{i}].type")
        if d["type"] not in driver_names():
            raise ConfigError(f"unknown driver type {d['type']!r}; available: {', '.join(driver_names())}",
                              file=path, key=f"driver[{i}].type")
        if driver_role(d) not in ROLE_KEY.choices:
            raise ConfigError(f"must be one of {', '.join(ROLE_KEY.choices)}, not {d[ROLE_KEY.name]!r}", file=path,
                              key=f"driver[{i}].{ROLE_KEY.name}")
        if driver_role(d) == "voluntary" and not patient.in_state("voluntary"):
            raise ConfigError(f"the patient {patient.name!r} has no voluntary muscle group for the voluntary "
                              "driver to drive", file=path, key=f"driver[{i}].{ROLE_KEY.name}")
    stimulation = merged.get("stimulation", {})
    if not isinstance(stimulation, dict):
        raise ConfigError("must be a table", file=path, key="stimulation")
    if sensor.lab.emg is not None and stimulation.get("mode", "channels") != "channels":
        raise ConfigError("the evoked EMG needs stimulation channels ([stimulation] mode = \"channels\")", file=path,
                          key="sensor.emg")
    return ServiceConfig(path=path, raw=merged, loop=loop, plant=plant, model=model, patient=patient,
                         stimulation=stimulation, safety=safety, sensor=sensor, metrics=metrics,
                         recording=recording, drivers=drivers)


def patient_model(kind, plant: PlantConfig, model: ModelConfig, patient: Patient, path: str) -> ModelConfig:
    """``model`` with the patient applied, or one error line when the plant type cannot take the patient."""
    model = apply_patient(model, patient)
    refused = None if kind.check is None or patient.able_bodied else kind.check(plant, model)
    if refused is not None:
        raise ConfigError(f"the {kind.name} plant cannot take the patient {patient.name!r}: {refused[1]}",
                          file=path, key=refused[0])
    return model
