"""The controller plug-in interface: a researcher's own Python controller runs in the loop's process through
the loopback driver (:mod:`drivers.controllers.loopback`), without writing a transport.

A plug-in is a class with a no-argument constructor::

    from drivers.controllers.plugin import ChannelCommand, Controller

    class MyPid(Controller):
        def reset(self, settings):          # before the run: the run's settings and the TOML table's keys
            self.kp = float(settings.params.get("kp_ma_per_rad", 80.0))
        def step(self, tick, time_s, frame):  # at rate_hz: the last sensor frame (None before the first)
            return [ChannelCommand(4, 300.0, 20.0, 40.0)]     # [] = alive, nothing new; None = silent
        def state(self):                     # optional: what to keep of the controller for the log
            return {"kp": self.kp}

and a config selects it in a ``[[driver]] type = "loopback"`` table with ``controller = "module:Class"`` (a
module on the Python path), ``controller = "file.py:Class"`` (relative to the config file) or the name of an
entry point in the group ``fes_hil.controllers`` (the built-in ``playback`` and ``elbow_hold`` are such
entry points). Every other key of the table except ``type``, ``controller`` and ``rate_hz`` reaches the
controller as ``settings.params``.

``step`` returns an iterable of :class:`ChannelCommand` and :class:`ExcitationCommand`: its commands are a sign
of life for the watchdog, and an empty one is a sign of life alone (a heartbeat); None sends nothing at all
(a controller that falls silent, which the watchdog then catches). A call that raises, or returns
something else, is handled like a bad frame from an external controller: counted and logged per reason
(``controller_error``, ``controller_malformed``), no sign of life, and the loop goes on; the watchdog zeroes
the stimulation if the controller stays silent.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from drivers.core.interface import entry_points

ENTRY_POINT_GROUP = "fes_hil.controllers"


class ControllerLoadError(ValueError):
    """The ``controller`` key names nothing that can be loaded as a controller."""


@dataclass(frozen=True)
class ControllerSettings:
    """What a controller may know of the run (SI units, radians)."""

    period_s: float                        # the loop's tick period
    rate_hz: float                         # how often ``step`` is called (as configured)
    call_period_s: float                   # the time between two calls: whole ticks nearest 1 / rate_hz
    channel_names: tuple[str, ...]         # stimulation channels; ChannelCommand.channel k is channel_names[k - 1]
    muscle_names: tuple[str, ...]          # excitation targets in direct mode (muscle elements or MTGs)
    group_names: tuple[str, ...]           # element groups (e.g. "deltclav") an ExcitationCommand may name
    dof_names: tuple[str, ...]             # the order of the frame's q and qdot
    unmodelled_fields: tuple[str, ...] = ()  # frame fields the plant does not model (NaN in every frame)
    frame_dtype: Any = None                # numpy dtype of the frames ``step`` gets (None: not known before them)
    params: Mapping[str, Any] = field(default_factory=dict)   # the config table's other keys, unchanged
    base_dir: str = "."                    # the config file's directory (for file names in params)
    config_file: str | None = None
    config_key: str = "driver"             # the table's key path, for error messages (e.g. "driver[0]")

    @property
    def direct(self) -> bool:
        """Direct excitation mode (no stimulation channels)."""
        return not self.channel_names


@dataclass(frozen=True, init=False)
class ChannelCommand:
    """Stimulation of one channel (1-based, as on the stimulator): pulse width (us), amplitude (mA), frequency
    (Hz) and pulse mode (0 single, 1 doublet, 2 triplet), held until the next command for that channel."""

    channel: int
    pulse_width_us: float
    amplitude_ma: float
    frequency_hz: float
    mode: int = 0

    def __init__(self, channel: int, pulse_width_us: float, amplitude_ma: float, frequency_hz: float,
                 mode: int = 0) -> None:
        """The fields stored at once: a frozen dataclass's generated __init__ sets each through
        ``object.__setattr__``, several times slower, and a controller builds commands on every call."""
        self.__dict__.update(channel=channel, pulse_width_us=pulse_width_us, amplitude_ma=amplitude_ma,
                             frequency_hz=frequency_hz, mode=mode)


@dataclass(frozen=True)
class ExcitationCommand:
    """Direct mode: the excitation (0..1) of a muscle element, MTG or element group, by name."""

    target: str
    value: float


class Controller(ABC):
    """A controller plug-in (see the module docstring)."""

    #: the most commands one ``step`` may return, 1..4096 (``drivers.controllers.loopback.MAX_COMMANDS``): read once, after
    #: ``reset``, to size the tick's command log; the rest of a longer return is rejected
    max_commands = 64

    def reset(self, settings: ControllerSettings) -> None:
        """Called once before the run; raise ValueError with a message for a bad parameter."""
        self.settings = settings

    @abstractmethod
    def step(self, tick: int, time_s: float, frame) -> Iterable[ChannelCommand | ExcitationCommand] | None:
        """One control step at ``rate_hz``; ``frame`` is the last sensor frame (a 1-element record array of
        ``drivers.core.contract.frame_dtype``, valid during the call) or None before the first one. Returns the
        commands ([] = alive, nothing to change; None = silent)."""

    def state(self) -> dict:
        """The controller's own state for logs (optional)."""
        return {}


BUILTIN = {"playback": "drivers.controllers.builtin:PlaybackController",
           "elbow_hold": "drivers.controllers.builtin:ElbowHoldController",
           "policy": "drivers.controllers.policy:PolicyController"}
"""The built-in controllers by name, as ``module:Class`` like their entry points (found here when the package is
not installed); loaded by name as any plug-in is, since :mod:`drivers.controllers.builtin` builds on this module."""


def _from_file(path: str, class_name: str):
    name = "fes_hil_controller_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ControllerLoadError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return getattr(module, class_name)


def controller_class(spec: str, base_dir: str = "."):
    """The class ``spec`` names: ``module:Class``, ``file.py:Class`` (relative to ``base_dir``) or an entry
    point / built-in name. Raises ControllerLoadError with the reason."""
    try:
        if ":" in spec:
            where, class_name = spec.rsplit(":", 1)
            if where.endswith(".py"):
                path = where if os.path.isabs(where) else os.path.join(base_dir, where)
                if not os.path.isfile(path):
                    raise ControllerLoadError(f"{path} not found")
                cls = _from_file(path, class_name)
            else:
                cls = getattr(importlib.import_module(where), class_name)
        else:
            found = [ep for ep in entry_points(ENTRY_POINT_GROUP) if ep.name == spec]
            if found:
                cls = found[0].load()
            elif spec in BUILTIN:
                module, class_name = BUILTIN[spec].split(":")
                cls = getattr(importlib.import_module(module), class_name)
            else:
                known = [*BUILTIN, *sorted({ep.name for ep in entry_points(ENTRY_POINT_GROUP)} - set(BUILTIN))]
                raise ControllerLoadError(f"unknown controller {spec!r}: give module:Class, file.py:Class or one of "
                                          f"{', '.join(known)}")
    except ControllerLoadError:
        raise
    except Exception as exc:        # an import error or an exception in the user's module
        raise ControllerLoadError(f"cannot load {spec!r}: {type(exc).__name__}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Controller)):
        raise ControllerLoadError(f"{spec!r} is not a drivers.controllers.plugin.Controller subclass")
    return cls
