"""Loopback driver: a controller plug-in (:mod:`drivers.controllers.plugin`) in the loop's own process, speaking
through the same command interface as the external transports.

The controller runs synchronously inside :meth:`LoopbackDriver.fetch` at ``rate_hz`` (every
round(1 / (rate_hz T)) ticks, like a real controller) and sees the last published sensor frame, so a loopback
run is deterministic. Its commands go to the tick engine, which applies the same limits as to any transport;
what the controller gets wrong is counted and logged per reason like a bad frame, never stops the loop:

- ``step`` raises, or its return raises while it is iterated or a command's field is read (a generator or a
  property of the plug-in's own): ``controller_error`` (the first exception of each type is logged with its
  message);
- ``step`` returns something that is not None or an iterable of commands, a command of another type, values
  that are not numbers, or more than ``max_commands`` commands: ``controller_malformed``.

Neither counts as a sign of life, so a failing controller trips the watchdog as a silent one does. Anything
but a list is taken through at most ``max_commands + 1`` items, and ``max_commands`` is read once, when the
driver is made (the command log is sized for it then): the plug-in cannot change it during the run.

A controller whose ``state()`` has keys right after ``reset`` gets a recording stream ``controller<index>``
(:meth:`Driver.record_streams`): after every call of ``step`` one row of the tick and those keys' values. A
``state()`` that raises, or lacks a key or gives a value that is not a number, is counted the same way and its
row is NaN.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from itertools import islice

import numpy as np

from drivers.controllers.plugin import (
    ChannelCommand,
    Controller,
    ControllerLoadError,
    ControllerSettings,
    ExcitationCommand,
    controller_class,
)
from drivers.core.config_table import ConfigTable
from drivers.core.interface import CommandSink, Driver, DriverContext
from sim.config_schema import REQUIRED, Key, Section
from sim.errors import UserInputError

log = logging.getLogger(__name__)
CONFIG_SCHEMA = Section("driver (loopback)", "An in-process controller plug-in (`controller`); every other key of "
                        "the table is the controller's parameter, checked by the controller (configs/loopback.toml, "
                        "configs/elbow-hold.toml).", (
    Key("type", "value", REQUIRED, "the driver: `loopback`"),
    Key("controller", "string", "playback", "a built-in (playback, elbow_hold), module:Class, file.py:Class or an "
        "entry point"),
    Key("rate_hz", "number", 50.0, "controller calls per second; at most one per tick (1 / loop period)", lo=0.0,
        lo_exclusive=True, why="at most one command set a tick"),
), array=True)
KEYS = CONFIG_SCHEMA.by_name
DRIVER_KEYS = tuple(KEYS)
"""The loopback table's own keys; the others are the controller's parameters."""
MAX_STATE_VALUES = 256
"""The most state() keys a controller may record."""
MAX_COMMANDS = 4096
"""The largest ``max_commands`` a controller may declare: every channel and muscle element of a model many
times over, while the tick's command log, allocated before the run for max_commands x the largest element
group's entries, stays a few megabytes."""
MAX_FAULT_KINDS = 64
"""Fault kinds (reason, place, exception type) logged once each; a plug-in making new exception types
without end is counted but no longer logged after these."""
MAX_DETAIL_CHARS = 300
"""A logged exception message is cut to this length (a plug-in's message may be of any size)."""

PLUGIN_FAULTS = (Exception, SystemExit)
"""What a plug-in's code may raise into the loop and is counted as its fault: a ``sys.exit()`` in ``step`` is a
plug-in bug like any other, never the end of the run."""


class LoopbackDriver(Driver):
    """Runs a :class:`drivers.controllers.plugin.Controller` in the loop's process (deterministic, no transport)."""

    name = "loopback"
    config_schema = CONFIG_SCHEMA

    def __init__(self, controller: Controller, settings: ControllerSettings, index: int = 0) -> None:
        self.controller = controller
        self.settings = settings
        self.max_commands = controller.max_commands      # read once: the log is sized for it (make_controller checks it)
        self.every = max(1, int(round(settings.call_period_s / settings.period_s)))
        self.muscle = {n: i for i, n in enumerate(settings.muscle_names)}
        self.groups = set(settings.group_names)
        self.last_frame = None
        self.errors_logged: dict[tuple[str, str, int], type] = {}     # kind -> its type, kept: ids stay unique
        self.state_names = state_names(controller)
        self.stream = f"controller{index}"
        self.state_rows = np.zeros(1, state_dtype(self.state_names))
        self.n_state = 0
        self._no_rows = self.state_rows[:0]
        if self.state_names:    # the row's tick and values as Python views: a numpy field store per value costs more
            row = memoryview(self.state_rows.view(np.uint8))
            self._state_tick, self._state_values = row[:8].cast("Q"), row[8:].cast("d")
        super().__init__(index)

    def record_streams(self) -> dict[str, np.dtype]:
        return {self.stream: self.state_rows.dtype} if self.state_names else {}

    def take_records(self, stream: str) -> np.ndarray:
        if stream != self.stream or not self.state_names:
            raise KeyError(stream)
        return self.state_rows if self.n_state else self._no_rows

    def fetch(self, tick: int, now_ns: int, sink: CommandSink) -> None:
        self.n_state = 0
        if tick % self.every:
            return
        try:
            commands = self.controller.step(tick, tick * self.settings.period_s, self.last_frame)
        except PLUGIN_FAULTS as exc:    # the plug-in's own bug: counted, the loop goes on
            self._fault(sink, now_ns, "controller_error", "", exc)
            commands = None
        if self.state_names:
            self._record_state(tick, sink, now_ns)
        try:
            self._take(commands, sink, now_ns)
        except Exception as exc:        # the last guard: a return whose very type misbehaves (a metaclass's own)
            self._fault(sink, now_ns, "controller_error", "step's return", exc)

    def _record_state(self, tick: int, sink: CommandSink, now_ns: int) -> None:
        """One row of the controller's state after its step (NaN where state() fails)."""
        self._state_tick[0] = tick
        values = self._state_values
        try:
            state = self.controller.state()
            for i, name in enumerate(self.state_names):
                values[i] = float(state[name])
        except Exception as exc:
            for i in range(len(self.state_names)):
                values[i] = np.nan
            malformed = isinstance(exc, (KeyError, TypeError, ValueError))
            self._fault(sink, now_ns, "controller_malformed" if malformed else "controller_error", "state()", exc)
        self.n_state = 1

    def _take(self, commands, sink: CommandSink, now_ns: int) -> None:
        """Hand one step's return value to the sink (module docstring)."""
        if commands is None:            # silent this call: no sign of life
            return
        if type(commands) is not list:  # a list is what most controllers return: taken as it is
            commands = self._materialise(commands, sink, now_ns)
            if commands is None:
                return
        if not commands:
            sink.heartbeat(self.index, now_ns)
        limit = self.max_commands
        for n, command in enumerate(commands):
            if n >= limit:
                self._fault(sink, now_ns, "controller_malformed", f"more than {limit} commands")
                return
            self._send(command, sink, now_ns)

    def _materialise(self, returned, sink: CommandSink, now_ns: int) -> list | None:
        """The first ``max_commands + 1`` items of a return that is not a list (a generator, a tuple, an
        iterable of the plug-in's own), so neither an endless iterable nor one that raises reaches the loop;
        None after counting a fault."""
        what = type(returned).__name__
        try:
            if isinstance(returned, (str, bytes, Mapping)):
                raise TypeError
            items = iter(returned)
        except TypeError:
            self._fault(sink, now_ns, "controller_malformed", f"step returned a {what}")
            return None
        try:
            return list(islice(items, self.max_commands + 1))
        except PLUGIN_FAULTS as exc:    # raised by the plug-in's code while iterating
            self._fault(sink, now_ns, "controller_error", f"iterating step's {what}", exc)
            return None

    def _send(self, command, sink: CommandSink, now_ns: int) -> None:
        try:
            if isinstance(command, ChannelCommand):
                sink.channel(self.index, now_ns, int(command.channel) - 1, float(command.pulse_width_us),
                             float(command.amplitude_ma), float(command.frequency_hz), int(command.mode))
            elif isinstance(command, ExcitationCommand):
                target, value = command.target, float(command.value)
                if target in self.muscle:
                    sink.excitation(self.index, now_ns, self.muscle[target], value)
                else:                   # a group, or unknown (the engine rejects it as unknown_muscle)
                    sink.group_excitation(self.index, now_ns, str(target), value)
            else:
                self._fault(sink, now_ns, "controller_malformed", f"a {type(command).__name__} is not a command")
        except (TypeError, ValueError, OverflowError) as exc:
            self._fault(sink, now_ns, "controller_malformed", "", exc)
        except Exception as exc:        # a field of the plug-in's own (a property, a __float__) that raises
            self._fault(sink, now_ns, "controller_error", "reading a command", exc)

    def _fault(self, sink: CommandSink, now_ns: int, reason: str, what: str, exc: Exception | None = None) -> None:
        """Count a fault; log it once per reason, place and exception type (the message is only read then)."""
        sink.reject(self.index, now_ns, reason)
        kind = (reason, what, id(type(exc)))
        if kind in self.errors_logged or len(self.errors_logged) >= MAX_FAULT_KINDS:
            return
        self.errors_logged[kind] = type(exc)
        detail = what if exc is None else describe(exc) if not what else f"{what}: {describe(exc)}"
        log.error("driver %d (loopback) controller %s: %s", self.index, reason, detail)

    def publish(self, frame: np.ndarray) -> None:
        self.last_frame = frame
        self.frames_published += 1

    def max_log_entries(self, largest_group: int) -> int:
        # the commands, a group expanding to its elements, and two faults: state() and the return's own
        return self.max_commands * max(1, largest_group) + 2

    @classmethod
    def parse_config(cls, table: dict, ctx: DriverContext) -> tuple[Controller, ControllerSettings]:
        """The controller of the table, constructed and reset (a schedule file is read; nothing opened)."""
        return make_controller(table, ctx)

    @classmethod
    def open(cls, spec: tuple[Controller, ControllerSettings], ctx: DriverContext) -> "LoopbackDriver":
        controller, settings = spec
        return cls(controller, settings, index=ctx.index)


def describe(exc: BaseException) -> str:
    """``Type: message`` of a plug-in's exception, cut to MAX_DETAIL_CHARS, whatever its ``__str__`` does."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:
        return "an exception whose message cannot be read"
    return text if len(text) <= MAX_DETAIL_CHARS else text[:MAX_DETAIL_CHARS] + "..."


def command_limit(controller: Controller) -> str | None:
    """What is wrong with the controller's ``max_commands`` (None when it is an integer from 1 to MAX_COMMANDS)."""
    try:
        value = controller.max_commands
    except Exception as exc:
        return f"max_commands cannot be read: {describe(exc)}"
    if type(value) is not int:
        return f"max_commands must be an integer from 1 to {MAX_COMMANDS}, not a {type(value).__name__}"
    if not 1 <= value <= MAX_COMMANDS:
        shown = value if abs(value) < 10 ** 12 else f"a {value.bit_length()}-bit integer"
        return (f"max_commands = {shown} is outside 1..{MAX_COMMANDS} (the tick's command log is allocated "
                "for it before the run)")
    return None


def state_names(controller: Controller) -> tuple[str, ...]:
    """The keys of ``controller.state()`` (right after reset): the columns of its recording stream."""
    state = controller.state()
    if not isinstance(state, Mapping):
        raise TypeError(f"state() must return a dict of name -> number, not a {type(state).__name__}")
    names = tuple(state)
    bad = [n for n in names if not isinstance(n, str) or not n.isidentifier() or n == "tick"]
    if bad:
        raise ValueError(f"state() keys must be identifiers other than 'tick', not {bad[0]!r}")
    if len(names) > MAX_STATE_VALUES:
        raise ValueError(f"state() has {len(names)} keys, more than {MAX_STATE_VALUES}")
    return names


def state_dtype(names: tuple[str, ...]) -> np.dtype:
    """A state row: the tick of the controller call and one float64 per state key."""
    return np.dtype([("tick", "<u8"), *((n, "<f8") for n in names)])


def controller_settings(table: dict, ctx: DriverContext) -> ControllerSettings:
    """The run's settings for the controller of ``table`` (its ``rate_hz`` checked)."""
    t = ConfigTable(table, f"driver[{ctx.index}]", ctx.file)
    key = KEYS["rate_hz"]
    rate = t.number(key.name, key.default, key.lo, 1.0 / ctx.period_s, key.lo_exclusive, key.why)
    every = max(1, int(round(1.0 / (rate * ctx.period_s))))
    return ControllerSettings(
        period_s=ctx.period_s, rate_hz=rate, call_period_s=every * ctx.period_s, channel_names=tuple(ctx.channel_names),
        muscle_names=tuple(ctx.muscle_names), group_names=tuple(ctx.group_names), dof_names=tuple(ctx.dof_names),
        unmodelled_fields=tuple(ctx.unmodelled_fields), frame_dtype=ctx.frame_dtype,
        params={k: v for k, v in table.items() if k not in DRIVER_KEYS}, base_dir=ctx.base_dir, config_file=ctx.file,
        config_key=f"driver[{ctx.index}]")


def make_controller(table: dict, ctx: DriverContext) -> tuple[Controller, ControllerSettings]:
    """Load, construct and reset the controller a ``[[driver]] type = "loopback"`` table names (``controller``,
    default ``playback``); every error names the file and the key."""
    t = ConfigTable(table, f"driver[{ctx.index}]", ctx.file)
    spec = t.key(KEYS["controller"])
    settings = controller_settings(table, ctx)
    try:
        controller = controller_class(spec, ctx.base_dir)()
    except ControllerLoadError as exc:
        raise t.error("controller", str(exc)) from None
    except Exception as exc:
        raise t.error("controller", f"{spec}() failed: {type(exc).__name__}: {exc}") from None
    try:
        controller.reset(settings)
    except Exception as exc:
        if isinstance(exc, UserInputError):             # a built-in's config or schedule error names its place
            raise
        raise t.error("controller", f"{spec}.reset: {type(exc).__name__}: {exc}") from None
    wrong = command_limit(controller)
    if wrong:
        raise t.error("controller", f"{spec}: {wrong}")
    try:
        state_names(controller)
    except Exception as exc:
        raise t.error("controller", f"{spec}.state: {type(exc).__name__}: {exc}") from None
    return controller, settings
