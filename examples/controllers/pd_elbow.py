"""An example controller plug-in (drivers.controllers.plugin): PD control of the elbow with a flexor and an extensor
stimulation channel and a slew-rate limit on the amplitude, as FES controllers use to avoid jerks.

Load it from a service config (configs/elbow-pd-plugin.toml)::

    [[driver]]
    type = "loopback"
    controller = "../examples/controllers/pd_elbow.py:PdElbow"   # relative to the config file
    target_deg = 70
    flexor_channel = 4
    extensor_channel = 5

u = kp (target - elbow) - kd elbow_velocity (mA); u > 0 drives the flexor, u < 0 the extensor, each with
amplitude threshold + |u|, at most max_amplitude_ma, changing by at most slew_ma_per_s.
"""
from __future__ import annotations

import math

from drivers.controllers.plugin import ChannelCommand, Controller


class PdElbow(Controller):
    max_commands = 2

    def reset(self, settings):
        super().reset(settings)
        p = dict(settings.params)
        self.target = math.radians(float(p.pop("target_deg", 90.0)))
        self.flexor = int(p.pop("flexor_channel"))
        self.extensor = int(p.pop("extensor_channel"))
        self.kp = float(p.pop("kp_ma_per_rad", 60.0))
        self.kd = float(p.pop("kd_ma_s_per_rad", 8.0))
        self.threshold = float(p.pop("threshold_ma", 15.0))
        self.max_amp = float(p.pop("max_amplitude_ma", 70.0))
        self.slew = float(p.pop("slew_ma_per_s", 200.0))
        self.pw = float(p.pop("pulse_width_us", 300.0))
        self.freq = float(p.pop("frequency_hz", 40.0))
        if p:
            raise ValueError(f"unknown parameter(s) {sorted(p)}")
        if not 1 <= self.flexor <= len(settings.channel_names) or not 1 <= self.extensor <= len(settings.channel_names):
            raise ValueError(f"channels are 1..{len(settings.channel_names)}")
        self.elbow = settings.dof_names.index("ELx")
        self.dt = settings.call_period_s
        self.amp = {self.flexor: 0.0, self.extensor: 0.0}

    def step(self, tick, time_s, frame):
        if frame is None:
            return []
        u = self.kp * (self.target - float(frame["elbow_flexion"][0])) - self.kd * float(frame["qdot"][0][self.elbow])
        want = min(self.max_amp, self.threshold + abs(u))
        goal = {self.flexor: want if u > 0 else 0.0, self.extensor: want if u < 0 else 0.0}
        step = self.slew * self.dt
        for ch, a in goal.items():
            self.amp[ch] += max(-step, min(step, a - self.amp[ch]))
        return [ChannelCommand(ch, self.pw, a, self.freq) for ch, a in self.amp.items()]

    def state(self):
        return {"flexor_amplitude_ma": self.amp[self.flexor], "extensor_amplitude_ma": self.amp[self.extensor]}
