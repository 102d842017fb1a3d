"""Service/experiment configuration (TOML): loop, plant, model, stimulation, safety, sensors, metrics,
recording and drivers. ``hil check-config FILE`` validates a file with precise errors (file, key,
reason); every run records the validated configuration in its recording header.

Units in the file are labelled in the key names (``period_ms``, ``watchdog_timeout_ms``,
``rom_margin_deg``, ...) and converted to SI / radians here.
"""
from __future__ import annotations

import copy
import math
import os
import tomllib
from dataclasses import dataclass, field
from os import PathLike

from drivers.core.config_table import ConfigTable
from hil.rt.loop import LoopConfig
from hil.rt.sensor import SensorModelConfig
from hil.safety.rules import GH_ACTIONS, SafetyConfig
from sim.das3.config import ConfigError, ModelConfig, model_config_from_table, not_utf8, unknown_name
from sim.input_file import InputFileError, read_input_file

SCHEMES = ("activation", "paper")
TABLES = ("loop", "plant", "model", "stimulation", "safety", "sensor", "metrics", "recording", "driver",
          "include")


@dataclass(frozen=True)
class MetricsConfig:
    enabled: bool = True
    host: str = "127.0.0.1"
    port: int = 9108        # hil serve: this port or refuse to start; hil run: this port if free, else any; 0: any
    linger_after_stop_s: float = 3.0     # /metrics stays up this long after a safety stop (a scrape sees it)
    targets_directory: str = "runs/prometheus-targets"   # where each run writes its Prometheus file_sd target


@dataclass(frozen=True)
class RecordingConfig:
    enabled: bool = True
    directory: str = "runs"
    on_failure: str = "stop"     # the recorder died or cannot write: stop the run, or go on unrecorded


#: ``[recording] on_failure``: what a run does when its recording fails (either way it exits 5)
RECORDING_FAILURE_ACTIONS = ("stop", "continue")


@dataclass(frozen=True)
class PlantConfig:
    initial: str = "equilibrium"
    scheme: str = "activation"
    type: str = "das3"                 # "das3" (the full model) or "mtg" (the reduced MTG arm, sim.mtg.plant)
    mtg_parameters: str = "default"    # MTG parameter file ("default": sim/data/mtg_default.json)


#: ``[plant] type``
PLANT_TYPES = ("das3", "mtg")


@dataclass(frozen=True)
class ServiceConfig:
    path: str
    raw: dict                                  # the merged TOML document (recorded in run headers)
    loop: LoopConfig
    plant: PlantConfig
    model: ModelConfig
    stimulation: dict                          # the [stimulation] table, parsed by hil.rt.stimulation
    safety: SafetyConfig
    sensor: SensorModelConfig
    metrics: MetricsConfig
    recording: RecordingConfig
    drivers: list[dict] = field(default_factory=list)

    @property
    def base_dir(self) -> str:
        return os.path.dirname(os.path.abspath(self.path))


def _read_toml(path: str) -> dict:
    try:
        return tomllib.loads(read_input_file(path).decode("utf-8"))
    except InputFileError as exc:
        raise ConfigError(exc.reason, file=path) from None
    except OSError as exc:
        raise ConfigError(f"cannot read file: {exc.strerror or exc}", file=path) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", file=path) from exc
    except UnicodeDecodeError as exc:     # tomllib decodes the whole file as UTF-8 first
        raise ConfigError(not_utf8(exc), file=path) from None


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
            self.documents[real] = _read_toml(path)
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


#: File-name keys: (table, key); a relative name means relative to the file that sets it.
_PATH_KEYS = (("plant", "initial"), ("plant", "mtg_parameters"), ("driver", "file"), ("driver", "dbc"),
              ("driver", "controller"))


def _anchor_relative_paths(doc: dict, base: str) -> None:
    """Make an included file's relative file names absolute, so they keep meaning "relative to this
    file" wherever it is included from (``plant.initial = "equilibrium"`` and ``plant.mtg_parameters =
    "default"`` are not files)."""
    for table, key in _PATH_KEYS:
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

MIN_TICK_STALL_TIMEOUT_MS = 250.0
"""The supervisor looks at the tick count every 50 ms, between other work: a shorter stall timeout would take a
scheduling hiccup of a healthy loop for a stall."""


def min_substeps(period_s: float) -> int:
    """Fewest plant sub-steps per tick that keep the step within MAX_PLANT_STEP_S."""
    return max(1, math.ceil(period_s / MAX_PLANT_STEP_S - 1e-9))


def service_config_from_dict(merged: dict, path: str) -> ServiceConfig:
    """Validate an already merged config document (e.g. the one recorded in a run's header)."""
    for key in merged:
        if key not in TABLES:
            raise ConfigError(unknown_name("table", key, TABLES), file=path, key=key)

    t = ConfigTable.section(merged, "loop", path)
    period = t.number("period_ms", 4.0, 1.0, 10.0) / 1000.0
    substeps = t.integer("substeps", 1, 1, 20)
    loop = LoopConfig(period_s=period, substeps=substeps, spin_us=t.number("spin_us", 200.0, 0.0, 5000.0),
                      sched_fifo=t.boolean("sched_fifo", True), priority=t.integer("priority", 80, 1, 99),
                      cpu=t.integer("cpu", None, 0, 1023), mlock=t.boolean("mlock", True))
    t.done()
    step = period / substeps
    if substeps < min_substeps(period):
        raise ConfigError(f"plant step period/substeps = {step * 1e3:g} ms exceeds {MAX_PLANT_STEP_S * 1e3:g} ms, "
                          "beyond the Rosenbrock scheme's tested range; raise substeps", file=path,
                          key="loop.substeps")

    t = ConfigTable.section(merged, "plant", path)
    plant = PlantConfig(initial=t.string("initial", "equilibrium"), scheme=t.string("scheme", "activation", SCHEMES),
                        type=t.string("type", "das3", PLANT_TYPES), mtg_parameters=t.string("mtg_parameters", "default"))
    t.done()
    if plant.mtg_parameters != "default" and plant.type != "mtg":
        raise ConfigError("mtg_parameters needs type = \"mtg\"", file=path, key="plant.mtg_parameters")
    model = model_config_from_table(merged.get("model", {}), file=path, prefix="model.")
    if plant.type == "mtg" and model.strength:
        raise ConfigError("scales the DAS3 muscles; the mtg plant's strength is its parameter file "
                          "(plant.mtg_parameters, e.g. from hil fit mtg)", file=path, key="model.strength")

    t = ConfigTable.section(merged, "safety", path)
    watchdog_ms = t.number("watchdog_timeout_ms", 500.0, 1.0, 60000.0)
    safety = SafetyConfig(
        watchdog_timeout_s=watchdog_ms / 1000.0,
        gh_action=t.string("gh_action", "monitor", GH_ACTIONS),
        gh_threshold=t.number("gh_threshold", 0.0, -1.0, 10.0),
        gh_zero_hold_s=t.number("gh_zero_hold_ms", 250.0, 0.0, 10000.0) / 1000.0,
        rom_margin_rad=math.radians(t.number("rom_margin_deg", 5.0, 0.0, 90.0)),
        rom_action=t.string("rom_action", "monitor", GH_ACTIONS),
        rom_zero_hold_s=t.number("rom_zero_hold_ms", 250.0, 0.0, 10000.0) / 1000.0,
        tick_stall_timeout_s=t.number("tick_stall_timeout_ms", max(watchdog_ms, MIN_TICK_STALL_TIMEOUT_MS * 2),
                                      MIN_TICK_STALL_TIMEOUT_MS, 60000.0) / 1000.0)
    t.done()
    if plant.type == "mtg" and safety.gh_action != "monitor":
        raise ConfigError("the mtg plant has no glenohumeral model (its GH stability is NaN): gh_action must be "
                          "\"monitor\"", file=path, key="safety.gh_action")

    t = ConfigTable.section(merged, "sensor", path)
    sensor = SensorModelConfig(
        seed=t.integer("seed", 0, 0, 2**63 - 1),
        angle_noise_rad=math.radians(t.number("angle_noise_deg", 0.0, 0.0, 45.0)),
        velocity_noise_rad_s=math.radians(t.number("velocity_noise_deg_s", 0.0, 0.0, 1000.0)),
        force_noise_n=t.number("force_noise_n", 0.0, 0.0, 1000.0),
        angle_quantum_rad=math.radians(t.number("angle_quantum_deg", 0.0, 0.0, 45.0)),
        delay_ticks=int(round(t.number("delay_ms", 0.0, 0.0, 1000.0) / 1000.0 / period)))
    t.done()

    t = ConfigTable.section(merged, "metrics", path)
    metrics = MetricsConfig(enabled=t.boolean("enabled", True), host=t.string("host", "127.0.0.1"),
                            port=t.integer("port", 9108, 0, 65535),
                            linger_after_stop_s=t.number("linger_after_stop_ms", 3000.0, 0.0, 60000.0) / 1000.0,
                            targets_directory=t.string("targets_directory", "runs/prometheus-targets"))
    t.done()
    t = ConfigTable.section(merged, "recording", path)
    recording = RecordingConfig(enabled=t.boolean("enabled", True), directory=t.string("directory", "runs"),
                                on_failure=t.string("on_failure", "stop", RECORDING_FAILURE_ACTIONS))
    t.done()

    drivers = merged.get("driver", [])
    if not isinstance(drivers, list) or not all(isinstance(d, dict) for d in drivers):
        raise ConfigError("must be an array of tables ([[driver]])", file=path, key="driver")
    for i, d in enumerate(drivers):
        if not isinstance(d.get("type"), str):
            raise ConfigError("missing 'type' (e.g. \"loopback\")", file=path, key=f"driver[{i}].type")
        from drivers.core.interface import driver_names
        if d["type"] not in driver_names():
            raise ConfigError(f"unknown driver type {d['type']!r}; available: {', '.join(driver_names())}",
                              file=path, key=f"driver[{i}].type")
    stimulation = merged.get("stimulation", {})
    if not isinstance(stimulation, dict):
        raise ConfigError("must be a table", file=path, key="stimulation")
    return ServiceConfig(path=path, raw=merged, loop=loop, plant=plant, model=model,
                         stimulation=stimulation, safety=safety, sensor=sensor, metrics=metrics,
                         recording=recording, drivers=drivers)
