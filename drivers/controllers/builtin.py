"""The built-in controller plug-ins (:mod:`drivers.controllers.plugin`), entry points ``playback`` and ``elbow_hold``:

- :class:`PlaybackController`: plays a CSV schedule (zero-order hold) of per-channel stimulation (columns
  ``time`` and ``ch<N>_pw_us``, ``ch<N>_amp_ma``, ``ch<N>_freq_hz``, ``ch<N>_mode``; missing columns are 0,
  and mode follows ScienceMode: 0 single, 1 doublet, 2 triplet) or, in direct mode, of per-muscle-element
  excitations (the ``hil simulate`` excitation format).
- :class:`ElbowHoldController`: a PID controller on the sensed elbow flexion angle and velocity that drives a
  flexor and an extensor channel's amplitude (e.g. biceps / triceps) to hold a target angle.
"""
from __future__ import annotations

import math
import os

import numpy as np

from drivers.controllers.imu_elbow import ImuElbow
from drivers.controllers.plugin import ChannelCommand, Controller, ControllerSettings, ExcitationCommand
from drivers.core.config_table import REQUIRED, ConfigTable
from sim.das3.excitations import ExcitationFileError, load_excitation_csv


def channel_columns(n_channels: int) -> tuple[str, ...]:
    """Column names of a channel schedule: ch1_pw_us, ch1_amp_ma, ch1_freq_hz, ch1_mode, ch2_..."""
    return tuple(f"ch{c + 1}_{f}" for c in range(n_channels) for f in ("pw_us", "amp_ma", "freq_hz", "mode"))


def _table(settings: ControllerSettings) -> ConfigTable:
    return ConfigTable(dict(settings.params), settings.config_key, settings.config_file)


class PlaybackController(Controller):
    """Plays a stimulation (or, with ``direct = true``, an excitation) schedule from a CSV file: keys ``file``
    (relative to the config) and ``direct``."""

    def reset(self, settings: ControllerSettings) -> None:
        super().reset(settings)
        t = _table(settings)
        path = t.string("file", REQUIRED)
        if not os.path.isabs(path):
            path = os.path.join(settings.base_dir, path)
        direct = t.boolean("direct", False)
        t.done()
        if not os.path.isfile(path):
            raise t.error("file", f"schedule {path} not found")
        if not direct and settings.direct:
            raise t.error("direct", "a channel schedule needs [stimulation] mode = \"channels\" (or set direct = true)")
        if direct and not settings.direct:
            raise t.error("direct", "an excitation schedule needs [stimulation] mode = \"direct\"")
        self.load(path, direct, settings)

    def load(self, path: str, direct: bool, settings: ControllerSettings) -> None:
        """Read and check the schedule."""
        n_channels = len(settings.channel_names)
        self.direct, self.n_channels = direct, n_channels
        columns = tuple(settings.muscle_names) if direct else channel_columns(n_channels)
        self.schedule = load_excitation_csv(path, columns, column_kind="muscle element" if direct
                                            else "stimulation column (chN_pw_us/amp_ma/freq_hz/mode)")
        if not direct:
            modes = self.schedule.values[:, 3::4]
            bad = np.argwhere(~np.isin(modes, (0.0, 1.0, 2.0)))
            if bad.size:
                row, ch = bad[0]
                raise ExcitationFileError(path, f"{float(modes[row, ch]):g} at time {self.schedule.times[row]:g} s is "
                                                "not a pulse mode: 0 single, 1 doublet, 2 triplet",
                                          column=f"ch{ch + 1}_mode")
        self.row = np.zeros(self.schedule.n_muscles)
        # in direct mode only the muscles the schedule ever excites are sent (the others stay at 0)
        used = np.flatnonzero(np.any(self.schedule.values != 0.0, axis=0))
        self.used = [(int(i), settings.muscle_names[i]) for i in used]
        self.max_commands = max(1, len(self.used)) if direct else max(1, n_channels)

    def step(self, tick: int, time_s: float, frame):
        self.schedule.fill(time_s, self.row)
        if self.direct:
            return [ExcitationCommand(name, float(self.row[i])) for i, name in self.used]
        return [ChannelCommand(c + 1, *(float(v) for v in self.row[4 * c:4 * c + 3]), int(self.row[4 * c + 3]))
                for c in range(self.n_channels)]


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

    Keys: ``target_deg``, ``flexor_channel`` and ``extensor_channel`` (1-based), ``kp_ma_per_rad``,
    ``ki_ma_per_rad_s``, ``kd_ma_s_per_rad``, ``threshold_ma``, ``pulse_width_us``, ``frequency_hz``,
    ``max_amplitude_ma``; ``elbow_sensor``: ``frame`` (the frame's elbow angle and velocity) or ``imu`` (both
    from the lab IMUs, :class:`drivers.controllers.imu_elbow.ImuElbow`; needs ``[sensor.imu]``).
    """

    max_commands = 2

    def reset(self, settings: ControllerSettings) -> None:
        super().reset(settings)
        t = _table(settings)
        n = len(settings.channel_names)
        if n == 0:
            raise t.error("controller", "elbow_hold drives stimulation channels: set [stimulation] mode = \"channels\"")
        self.flexor = t.integer("flexor_channel", REQUIRED, 1, n)
        self.extensor = t.integer("extensor_channel", REQUIRED, 1, n)
        if self.flexor == self.extensor:
            raise t.error("extensor_channel", "must differ from flexor_channel")
        self.max_amp = t.number("max_amplitude_ma", 80.0, 0.0, 200.0, lo_exclusive=True)
        self.target = math.radians(t.number("target_deg", 90.0, 0.0, 180.0))
        self.kp = t.number("kp_ma_per_rad", 80.0, 0.0, 1e4)
        self.ki = t.number("ki_ma_per_rad_s", 200.0, 0.0, 1e5)
        self.kd = t.number("kd_ma_s_per_rad", 10.0, 0.0, 1e3)
        self.threshold = t.number("threshold_ma", 15.0, 0.0, self.max_amp, why="at most max_amplitude_ma")
        self.pw = t.number("pulse_width_us", 300.0, 0.0, 1000.0, lo_exclusive=True)
        self.freq = t.number("frequency_hz", 40.0, 0.0, 1000.0, lo_exclusive=True)
        self.imu = ImuElbow() if t.string("elbow_sensor", "frame", ("frame", "imu")) == "imu" else None
        if self.imu is not None and not ImuElbow.reads(settings.frame_dtype):
            raise t.error("elbow_sensor", "\"imu\" needs the lab IMUs: add a [sensor.imu] table (the run's frame has "
                                          "no imu_quat and imu_gyro)")
        t.done()
        self.elbow = settings.dof_names.index("ELx")
        self.dt = settings.call_period_s
        self.integral = 0.0

    def step(self, tick: int, time_s: float, frame):
        if frame is None:
            return []                   # alive, nothing to command before the first frame
        if self.imu is not None:
            angle, velocity = self.imu.angle_rate(frame)
        else:
            angle, velocity = float(frame["elbow_flexion"][0]), float(frame["qdot"][0][self.elbow])
        error = self.target - angle
        command = self.kp * error + self.ki * self.integral - self.kd * velocity
        headroom = self.max_amp - self.threshold
        if abs(command) < headroom or (command > 0) != (error > 0):
            self.integral += error * self.dt
        amp = min(self.max_amp, self.threshold + abs(command)) if command != 0.0 else 0.0
        flex, ext = (amp, 0.0) if command > 0 else (0.0, amp)
        return [ChannelCommand(self.flexor, self.pw, flex, self.freq), ChannelCommand(self.extensor, self.pw, ext,
                                                                                     self.freq)]

    def state(self) -> dict:
        return {"integral_rad_s": self.integral}
