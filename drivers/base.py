"""The driver interface every controller transport implements (after python-can's ``BusABC``).

A driver connects one external (or in-process) controller to the HIL loop:

- :meth:`Driver.fetch` is called once per tick, never blocks, and hands every command that arrived since
  the last call to the loop's :class:`CommandSink` (parsed, with its receive time). Malformed transport
  frames are reported with :meth:`CommandSink.reject` and a short reason; they never raise.
- :meth:`Driver.publish` sends the tick's sensor frame back (non-blocking; drops and counts on overflow).
- :meth:`Driver.shutdown` is idempotent; ``__del__`` warns only about drivers that finished ``__init__``.

Validation against stimulation limits, latching (zero-order hold), the watchdog, recording and metrics
live in the loop's sink, so every transport behaves the same. Backends are registered by name in
:data:`DRIVERS` and imported only when chosen.
"""
from __future__ import annotations

import importlib
import warnings
from abc import ABC, abstractmethod
from typing import Protocol

import numpy as np

# Command kinds (recorded in the command log)
KIND_CHANNEL = 1     # values = (pulse width us, amplitude mA, frequency Hz, pulse mode 1..3)
KIND_EXCITATION = 2  # index = muscle element (or group, negative: -1 - group index); values[0] = u
KIND_HEARTBEAT = 3
KIND_REJECTS = 0      # frames a transport rejected: status = reason code, values[0] = how many (>= 1)
KIND_DRIVER_LOST = 4  # the driver's transport died: what it latched was set to zero at this tick

COMMAND_DTYPE = np.dtype([
    ("tick", "<i8"),        # tick at which the command was latched
    ("receive_ns", "<i8"),  # CLOCK_MONOTONIC receive time
    ("driver", "<u2"),      # index of the driver in the run's driver list
    ("kind", "u1"),
    ("status", "u1"),       # 0 accepted, else a REJECT_REASONS index + 1
    ("index", "<i2"),       # channel or muscle index (-1: none)
    ("values", "<f8", (4,)),
])


#: Why a command was not applied as sent (recorded as status = index + 1, counted per driver and reason).
#: Append only: recordings store this list in their header.
REJECT_REASONS = ("pulse_width_limit", "amplitude_limit", "frequency_limit", "mode_not_allowed",
                  "non_finite", "unknown_channel", "unknown_muscle", "bad_frame", "bad_checksum",
                  "bad_length", "unknown_id", "stale_counter", "wrong_mode", "excitation_clipped",
                  "duplicate_counter", "out_of_range", "unknown_command")


class DriverError(Exception):
    """Base class of driver errors."""


class DriverInitializationError(DriverError):
    """The transport could not be opened (bad port, missing interface, ...)."""


class DriverOperationError(DriverError):
    """The transport failed while running (device unplugged, ...)."""


class CommandSink(Protocol):
    """What the loop offers a driver during :meth:`Driver.fetch`."""

    def channel(self, driver: int, receive_ns: int, channel: int, pulse_width_us: float,
                amplitude_ma: float, frequency_hz: float, mode: int) -> bool: ...

    def excitation(self, driver: int, receive_ns: int, muscle: int, value: float) -> bool: ...

    def group_excitation(self, driver: int, receive_ns: int, group: str, value: float) -> bool: ...

    def heartbeat(self, driver: int, receive_ns: int) -> None: ...

    def reject(self, driver: int, receive_ns: int, reason: str) -> None: ...

    def rejects(self, driver: int, receive_ns: int, reason: str, count: int) -> None: ...

    def driver_lost(self, driver: int, receive_ns: int) -> None: ...


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
    "loopback": ("drivers.loopback", "LoopbackDriver"),
    "can": ("drivers.can", "CanDriver"),
    "sciencemode2": ("drivers.serial_stim", "ScienceModeDriver"),
}


def driver_class(name: str) -> type[Driver]:
    """The driver class registered as ``name`` (imported on demand)."""
    try:
        module, cls = DRIVERS[name]
    except KeyError:
        raise ValueError(f"unknown driver {name!r}; available: {', '.join(sorted(DRIVERS))}") from None
    try:
        return getattr(importlib.import_module(module), cls)
    except ImportError as exc:
        raise DriverInitializationError(f"driver {name!r} cannot be loaded: {exc}") from exc
