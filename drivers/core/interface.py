"""The driver interface every controller transport implements (after python-can's ``BusABC``).

A driver connects one external (or in-process) controller to the HIL loop. Its rules:

1. :meth:`Driver.parse_config` is pure: it validates the driver's config table against the
   :class:`DriverContext` and returns a spec; it opens no device, port, bus or process (it may read the
   files the table names, e.g. a DBC or a schedule). ``hil check-config`` stops here.
2. :meth:`Driver.open` turns a spec into a running driver: it opens the transport (and starts a link
   process where I/O blocks). Constructing an endpoint opens nothing; ``open`` does.
3. :meth:`Driver.fetch` is called once per tick, never blocks, and hands every command that arrived
   since the last call to the loop's :class:`CommandSink`, with its receive time. Malformed transport
   frames are counted by reason (:meth:`CommandSink.rejects`); fetch never raises.
4. :meth:`Driver.publish` sends the tick's sensor frame back; it never blocks (drops and counts on
   overflow).
5. :meth:`Driver.shutdown` is idempotent; ``__del__`` warns only about drivers that finished ``__init__``.
6. A driver knows the run only through its :class:`DriverContext` (model sizes and names, channels,
   period, scheduling), never the engine.
7. A driver may add streams to the run's recording (:meth:`Driver.record_streams`, e.g. a controller
   plug-in's state): after each fetch the loop takes the rows that fetch produced (:meth:`Driver.take_records`)
   and records them before the tick's own record.
8. A driver that defines ``on_tick(record, engine, actuation_ns)`` (:class:`hil.rt.tick.TickListener`) also
   gets each finished tick record after ``publish`` (e.g. the applied stimulation and the tick's start for
   :mod:`drivers.lsl.driver`); it reads the record only, never the engine (rule 6), and never blocks.

Validation against stimulation limits, latching (zero-order hold), the watchdog, recording and metrics
live in the loop's sink, so every transport behaves the same. Backends are registered by name in
:data:`DRIVERS` (imported only when chosen); third-party packages register theirs under the entry-point
group :data:`ENTRY_POINT_GROUP` (``name = "package.module:DriverClass"``).
"""
from __future__ import annotations

import functools
import importlib
import importlib.metadata
import warnings
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from sim.errors import UserInputError


class DriverError(Exception):
    """Base class of driver errors."""


class DriverInitializationError(UserInputError, DriverError):
    """The transport could not be opened (bad port, missing interface, ...)."""


class CommandSink(Protocol):
    """What the loop offers a driver during :meth:`Driver.fetch`."""

    def channel(self, driver: int, receive_ns: int, channel: int, pulse_width_us: float,
                amplitude_ma: float, frequency_hz: float, mode: int) -> bool: ...

    def excitation(self, driver: int, receive_ns: int, muscle: int, value: float) -> bool: ...

    def group_excitation(self, driver: int, receive_ns: int, group: str, value: float) -> bool: ...

    def voluntary(self, driver: int, receive_ns: int, muscle: int, value: float) -> bool: ...

    def heartbeat(self, driver: int, receive_ns: int) -> None: ...

    def reject(self, driver: int, receive_ns: int, reason: str) -> None: ...

    def rejects(self, driver: int, receive_ns: int, reason: str, count: int) -> None: ...

    def driver_lost(self, driver: int, receive_ns: int) -> None: ...


@dataclass(frozen=True)
class DriverContext:
    """What a driver may know of the run (rule 6): built once from the config and the model."""
    index: int                          # the driver's place in the run's driver list
    file: str | None                    # the config file, for error messages
    base_dir: str                       # relative file names in the driver's table are relative to this
    period_s: float
    dof_names: tuple[str, ...]
    muscle_names: tuple[str, ...]
    group_names: tuple[str, ...]        # muscle groups, in the order group excitations index them
    channel_names: tuple[str, ...]      # stimulation channels ([[stimulation.channel]]); () in direct mode
    frame_dtype: Any                    # numpy dtype of the sensor frame
    unmodelled_fields: tuple[str, ...] = ()   # frame fields the plant does not model (NaN): GLENOHUMERAL_FIELDS or ()
    loop_sched_fifo: bool = False
    loop_priority: int = 0
    loop_cpu: int | None = None
    role: str = "controller"            # "voluntary": the patient's own input (hil.rt.voluntary), not a controller

    @property
    def key(self) -> str:
        """The driver's table in error messages, e.g. ``driver[1]``."""
        return f"driver[{self.index}]"


class Driver(ABC):
    """Base class of all transports. Subclasses call ``super().__init__()`` last."""

    #: registry name of the backend
    name = "driver"
    #: ports a controller connects to (e.g. {"stimulator": "/dev/pts/3"}), announced by the service
    ports: dict[str, str] = {}
    _is_shutdown = True  # cleared at the end of __init__: half-built drivers are not "unclosed"

    def __init__(self, index: int = 0) -> None:
        self.index = index
        self.frames_received = 0
        self.frames_published = 0
        self.publish_dropped = 0
        self._is_shutdown = False

    @classmethod
    def parse_config(cls, table: dict, ctx: DriverContext):
        """Rule 1: the validated spec of a ``[[driver]]`` table (ConfigError naming the key if invalid)."""
        raise NotImplementedError(f"{cls.__name__} has no parse_config")

    @classmethod
    def open(cls, spec, ctx: DriverContext) -> "Driver":
        """Rule 2: a running driver from a spec of :meth:`parse_config` (DriverInitializationError if the
        transport cannot be opened)."""
        raise NotImplementedError(f"{cls.__name__} has no open")

    @abstractmethod
    def fetch(self, tick: int, now_ns: int, sink: CommandSink) -> None:
        """Hand every command received since the last call to ``sink`` (non-blocking)."""

    @abstractmethod
    def publish(self, frame: np.ndarray) -> None:
        """Send one sensor frame (a 0-d/1-element record of the run's frame dtype); never blocks."""

    def connected(self) -> bool:
        """Whether a controller is attached (the watchdog decides whether it is alive)."""
        return True

    def check_alive(self) -> bool:
        """Whether the transport still works (called between ticks; False once it has died)."""
        return True

    def max_log_entries(self, largest_group: int) -> int:
        """The most command-log entries one fetch can produce (the engine's log is sized from the sum
        over the run's drivers, so no accepted command is ever left out of a recording)."""
        return 1024

    def record_streams(self) -> dict[str, np.dtype]:
        """Rule 7: the recording streams this driver fills (name -> record dtype); none by default."""
        return {}

    def take_records(self, stream: str) -> np.ndarray:
        """Rule 7: the rows of ``stream`` the last fetch produced (a view, valid until the next fetch)."""
        raise KeyError(stream)

    @property
    def stats(self) -> dict:
        return {"frames_received": self.frames_received, "frames_published": self.frames_published,
                "publish_dropped": self.publish_dropped}

    def _shutdown(self) -> None:
        """Release the transport (subclasses)."""

    def shutdown(self) -> None:
        if self._is_shutdown:
            return
        self._is_shutdown = True
        self._shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def __del__(self) -> None:
        if not self._is_shutdown:
            warnings.warn(f"{type(self).__name__} was not shut down", ResourceWarning, stacklevel=2)


#: name -> (module, class); imported only when a config selects it
DRIVERS: dict[str, tuple[str, str]] = {
    "loopback": ("drivers.controllers.loopback", "LoopbackDriver"),
    "can": ("drivers.can.driver", "CanDriver"),
    "sciencemode2": ("drivers.stimulators.rehastim2.driver", "ScienceModeDriver"),
    "lsl": ("drivers.lsl.driver", "LslDriver"),
    "sciencemode4": ("drivers.stimulators.p24.driver", "P24Driver"),
}
#: entry-point group of third-party drivers (``[project.entry-points."fes_hil.drivers"]``)
ENTRY_POINT_GROUP = "fes_hil.drivers"


@functools.cache
def entry_points(group: str) -> tuple:
    """The entry points of ``group``, looked up once per process (a lookup reads every installed package's
    metadata; a package installed later is seen by the next process)."""
    return tuple(importlib.metadata.entry_points(group=group))


def driver_names() -> list[str]:
    """Every driver a config may name: the built-in ones and those registered as entry points."""
    return sorted(set(DRIVERS) | {ep.name for ep in entry_points(ENTRY_POINT_GROUP)})


def driver_class(name: str) -> type[Driver]:
    """The driver class registered as ``name`` (imported on demand)."""
    if name not in DRIVERS:
        found = [ep for ep in entry_points(ENTRY_POINT_GROUP) if ep.name == name]
        if not found:
            raise ValueError(f"unknown driver {name!r}; available: {', '.join(driver_names())}")
        try:
            return found[0].load()
        except Exception as exc:      # a broken plug-in is the user's input, not our bug
            raise DriverInitializationError(f"driver {name!r} ({found[0].value}) cannot be loaded: {exc}") from exc
    module, cls = DRIVERS[name]
    try:
        return getattr(importlib.import_module(module), cls)
    except ImportError as exc:
        raise DriverInitializationError(f"driver {name!r} cannot be loaded: {exc}") from exc
