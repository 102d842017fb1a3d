"""Loopback driver: an in-process controller speaking through the same interface as external transports.

Controllers run synchronously inside :meth:`LoopbackDriver.fetch` and see the last published sensor
frame, so a loopback run is fully deterministic. Two controllers:

- :class:`PlaybackController`: plays a CSV schedule (zero-order hold) of per-channel stimulation
  (columns ``time`` and ``ch<N>_pw_us``, ``ch<N>_amp_ma``, ``ch<N>_freq_hz``, ``ch<N>_mode``; missing
  columns are 0, and mode follows ScienceMode: 0 single, 1 doublet, 2 triplet)
  or, in direct mode, of per-muscle-element excitations (the ``hil simulate`` excitation format).
- :class:`ElbowHoldController`: a PID controller on the sensed elbow flexion angle and velocity that
  drives a flexor and an extensor channel's amplitude (e.g. biceps / triceps) to hold a target angle.

Both send at ``rate_hz`` (commands every round(1 / (rate_hz T)) ticks), like a real controller.
"""
from __future__ import annotations

import math
import os
from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

from drivers.base import CommandSink, Driver, DriverContext
from drivers.config_table import REQUIRED, ConfigTable
from sim.excitations import ExcitationFileError, load_excitation_csv
from sim.model import DOF_NAMES

ELBOW_DOF = DOF_NAMES.index("ELx")


class Controller(ABC):
    """An in-process controller: called once per tick with the last sensor frame (None at tick 0)."""

    #: the most commands one call can emit (sizes the tick's command log)
    max_commands = 1024

    @abstractmethod
    def control(self, tick: int, time_s: float, frame, emit: "_Emitter") -> None: ...


class _Emitter:
    """Binds a sink, driver index and receive time so controllers only pass command values."""

    __slots__ = ("sink", "driver", "now_ns")

    def __init__(self, sink: CommandSink, driver: int, now_ns: int) -> None:
        self.sink, self.driver, self.now_ns = sink, driver, now_ns

    def channel(self, channel: int, pulse_width_us: float, amplitude_ma: float, frequency_hz: float,
                mode: int = 0) -> None:
        self.sink.channel(self.driver, self.now_ns, channel, pulse_width_us, amplitude_ma, frequency_hz, mode)

    def excitation(self, muscle: int, value: float) -> None:
        self.sink.excitation(self.driver, self.now_ns, muscle, value)

    def heartbeat(self) -> None:
        self.sink.heartbeat(self.driver, self.now_ns)


def channel_columns(n_channels: int) -> tuple[str, ...]:
    """Column names of a channel schedule: ch1_pw_us, ch1_amp_ma, ch1_freq_hz, ch1_mode, ch2_..."""
    return tuple(f"ch{c + 1}_{f}" for c in range(n_channels) for f in ("pw_us", "amp_ma", "freq_hz", "mode"))


class PlaybackController(Controller):
    """Plays a stimulation (or, with ``direct=True``, an excitation) schedule from a CSV file."""

    def __init__(self, path: str, n_channels: int, muscle_names: Sequence[str], period_s: float,
                 rate_hz: float = 50.0, direct: bool = False) -> None:
        self.direct = direct
        self.n_channels = n_channels
        columns = tuple(muscle_names) if direct else channel_columns(n_channels)
        self.schedule = load_excitation_csv(path, columns, column_kind="muscle element" if direct
                                            else "stimulation column (chN_pw_us/amp_ma/freq_hz/mode)")
        if not direct:
            modes = self.schedule.values[:, 3::4]
            bad = np.argwhere(~np.isin(modes, (0.0, 1.0, 2.0)))
            if bad.size:
                row, ch = bad[0]
                raise ExcitationFileError(path, f"{float(modes[row, ch]):g} at time {self.schedule.times[row]:g} s is not "
                                                "a pulse mode: 0 single, 1 doublet, 2 triplet",
                                          column=f"ch{ch + 1}_mode")
        self.every = max(1, int(round(1.0 / (rate_hz * period_s))))
        self.row = np.zeros(self.schedule.n_muscles)
        # in direct mode only the muscles the schedule ever excites are sent (the others stay at 0):
        # a command per muscle is a Python call in the tick: send only the ones that can be non-zero
        self.used = [int(i) for i in np.flatnonzero(np.any(self.schedule.values != 0.0, axis=0))]
        self.max_commands = max(1, len(self.used)) if direct else n_channels

    def control(self, tick: int, time_s: float, frame, emit: _Emitter) -> None:
        if tick % self.every:
            return
        self.schedule.fill(time_s, self.row)
        if self.direct:
            for m in self.used:
                emit.excitation(m, self.row[m])
            if not self.used:
                emit.heartbeat()
            return
        for c in range(self.n_channels):
            pw, amp, freq, mode = self.row[4 * c:4 * c + 4]
            emit.channel(c, pw, amp, freq, int(mode))


class ElbowHoldController(Controller):
    """PID control of elbow flexion with two antagonist channels (rad inside; degrees at the config edge).

    e = target - ELx, u = kp e + ki integral(e) - kd dELx/dt (derivative on the sensed velocity, so a
    set-point change gives no kick). A positive u drives the flexor channel, a negative one the
    extensor, with amplitude threshold + |u| (at most ``max_amplitude_ma``) at fixed pulse width and
    frequency. Adding the stimulation threshold (the amplitude where the muscle starts to respond at
    that pulse width, measured per subject) inverts the recruitment dead zone: without it the output
    must wind through 0..threshold mA, where no muscle responds, whenever it changes sign, and the loop
    limit-cycles (README "Loopback controllers"). The integrator stops while the output saturates in the
    direction of the error (anti-windup).
    """

    def __init__(self, target_rad: float, flexor_channel: int, extensor_channel: int, period_s: float,
                 kp_ma_per_rad: float = 80.0, ki_ma_per_rad_s: float = 200.0, kd_ma_s_per_rad: float = 10.0,
                 threshold_ma: float = 15.0, pulse_width_us: float = 300.0, frequency_hz: float = 40.0,
                 max_amplitude_ma: float = 80.0, rate_hz: float = 50.0) -> None:
        self.target = target_rad
        self.flexor, self.extensor = flexor_channel, extensor_channel
        self.kp, self.ki, self.kd = kp_ma_per_rad, ki_ma_per_rad_s, kd_ma_s_per_rad
        self.threshold = threshold_ma
        self.pw, self.freq, self.max_amp = pulse_width_us, frequency_hz, max_amplitude_ma
        self.every = max(1, int(round(1.0 / (rate_hz * period_s))))
        self.dt = self.every * period_s
        self.integral = 0.0
        self.max_commands = 2

    def control(self, tick: int, time_s: float, frame, emit: _Emitter) -> None:
        if tick % self.every:
            return
        if frame is None:
            emit.heartbeat()
            return
        error = self.target - float(frame["elbow_flexion"][0])
        velocity = float(frame["qdot"][0][ELBOW_DOF])
        command = self.kp * error + self.ki * self.integral - self.kd * velocity
        headroom = self.max_amp - self.threshold
        if abs(command) < headroom or (command > 0) != (error > 0):
            self.integral += error * self.dt
        amp = min(self.max_amp, self.threshold + abs(command)) if command != 0.0 else 0.0
        flex, ext = (amp, 0.0) if command > 0 else (0.0, amp)
        emit.channel(self.flexor, self.pw, flex, self.freq, 0)
        emit.channel(self.extensor, self.pw, ext, self.freq, 0)


class LoopbackDriver(Driver):
    """Runs a :class:`Controller` in the loop's process (deterministic, no transport)."""

    name = "loopback"

    def __init__(self, controller: Controller, period_s: float, index: int = 0) -> None:
        self.controller = controller
        self.period_s = period_s
        self.last_frame = None
        super().__init__(index)

    def fetch(self, tick: int, now_ns: int, sink: CommandSink) -> None:
        self.controller.control(tick, tick * self.period_s, self.last_frame, _Emitter(sink, self.index, now_ns))

    def publish(self, frame: np.ndarray) -> None:
        self.last_frame = frame
        self.frames_published += 1

    def max_log_entries(self, largest_group: int) -> int:
        return self.controller.max_commands

    @classmethod
    def parse_config(cls, table: dict, ctx: DriverContext) -> Controller:
        """The controller of the table (reads its schedule file, if any; opens nothing)."""
        return make_controller(table, n_channels=len(ctx.channel_names), muscle_names=ctx.muscle_names,
                               period_s=ctx.period_s, base_dir=ctx.base_dir, file=ctx.file, index=ctx.index)

    @classmethod
    def open(cls, spec: Controller, ctx: DriverContext) -> "LoopbackDriver":
        return cls(spec, ctx.period_s, index=ctx.index)


CONTROLLERS = ("playback", "elbow_hold")


def make_controller(spec: dict, *, n_channels: int, muscle_names: Sequence[str], period_s: float,
                    base_dir: str = ".", file: str | None = None, index: int = 0) -> Controller:
    """Build a controller from its config table (``[[driver]] type = "loopback"``); every error names
    the file, the key ``driver[index].<key>`` and the reason.

    Keys: ``controller`` (playback | elbow_hold), ``rate_hz``; playback: ``file`` (CSV, relative to the
    config), ``direct``; elbow_hold: ``target_deg``, ``flexor_channel`` and ``extensor_channel`` (1-based),
    ``kp_ma_per_rad``, ``ki_ma_per_rad_s``, ``kd_ma_s_per_rad``, ``threshold_ma``, ``pulse_width_us``,
    ``frequency_hz``, ``max_amplitude_ma``.
    """
    t = ConfigTable(spec, f"driver[{index}]", file)
    t.get("type")
    kind = t.string("controller", "playback", CONTROLLERS)
    rate = t.number("rate_hz", 50.0, 0.0, 1.0 / period_s, lo_exclusive=True, why="at most one command set a tick")
    if kind == "playback":
        path = t.string("file", REQUIRED)
        if not os.path.isabs(path):
            path = os.path.join(base_dir, path)
        direct = t.boolean("direct", False)
        t.done()
        if not os.path.isfile(path):
            raise t.error("file", f"schedule {path} not found")
        if not direct and n_channels == 0:
            raise t.error("direct", "a channel schedule needs [stimulation] mode = \"channels\" (or set direct = true)")
        if direct and n_channels:
            raise t.error("direct", "an excitation schedule needs [stimulation] mode = \"direct\"")
        return PlaybackController(path, n_channels, muscle_names, period_s, rate_hz=rate, direct=direct)
    if n_channels == 0:
        raise t.error("controller", "elbow_hold drives stimulation channels: set [stimulation] mode = \"channels\"")
    flexor = t.integer("flexor_channel", REQUIRED, 1, n_channels)
    extensor = t.integer("extensor_channel", REQUIRED, 1, n_channels)
    if flexor == extensor:
        raise t.error("extensor_channel", "must differ from flexor_channel")
    max_amplitude = t.number("max_amplitude_ma", 80.0, 0.0, 200.0, lo_exclusive=True)
    controller = ElbowHoldController(
        math.radians(t.number("target_deg", 90.0, 0.0, 180.0)), flexor - 1, extensor - 1, period_s,
        kp_ma_per_rad=t.number("kp_ma_per_rad", 80.0, 0.0, 1e4),
        ki_ma_per_rad_s=t.number("ki_ma_per_rad_s", 200.0, 0.0, 1e5),
        kd_ma_s_per_rad=t.number("kd_ma_s_per_rad", 10.0, 0.0, 1e3),
        threshold_ma=t.number("threshold_ma", 15.0, 0.0, max_amplitude, why="at most max_amplitude_ma"),
        pulse_width_us=t.number("pulse_width_us", 300.0, 0.0, 1000.0, lo_exclusive=True),
        frequency_hz=t.number("frequency_hz", 40.0, 0.0, 1000.0, lo_exclusive=True),
        max_amplitude_ma=max_amplitude, rate_hz=rate)
    t.done()
    return controller
