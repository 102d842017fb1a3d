"""An example controller plug-in that reads the patient's own movement: the shoulder-position command of
C5/C6 neuroprostheses. The user elevates the shoulder girdle; the controller measures the elevation in the
sensor frame it gets (the clavicle's elevation ``SCz`` in ``q``, where a lab's transducer over the sternum and
clavicle would measure it) and stimulates the elbow flexors in proportion.

Shoulder movement as a command source for a neuroprosthesis: IEEE Trans Biomed Eng 37(9):876-885 (1990),
doi:10.1109/10.58598 (Johnson and Peckham): in C5 tetraplegia elevation gave the largest range, coupled with
retraction, and 8-13 distinguishable command levels. The Freehand system used the same kind of proportional
shoulder command for grasp; here the output is the elbow-flexor channel, so the example runs on the DAS3 arm.

    command c = clip((elevation - neutral - deadband) / full_scale, 0, 1)
    amplitude = 0 if c = 0, else threshold + c (max_amplitude - threshold)

``neutral`` is the elevation of the first frame (the user at rest when the run starts). The dead band, full
scale and amplitudes are this example's choices (*proposal*), not published values. Load it from a service
config (configs/c5-shoulder-command.toml)::

    [[driver]]
    type = "loopback"
    controller = "../examples/patients/shoulder_command.py:ShoulderCommand"
    channel = 4                 # biceps
"""
from __future__ import annotations

import math

from drivers.controllers.plugin import ChannelCommand, Controller


class ShoulderCommand(Controller):
    max_commands = 1

    def reset(self, settings):
        super().reset(settings)
        p = dict(settings.params)
        self.channel = int(p.pop("channel", 4))
        self.dof = settings.dof_names.index(str(p.pop("dof", "SCz")))
        self.deadband = math.radians(float(p.pop("deadband_deg", 2.0)))
        self.full_scale = math.radians(float(p.pop("full_scale_deg", 12.0)))
        self.threshold = float(p.pop("threshold_ma", 15.0))
        self.max_amp = float(p.pop("max_amplitude_ma", 40.0))
        self.pw = float(p.pop("pulse_width_us", 300.0))
        self.freq = float(p.pop("frequency_hz", 40.0))
        if p:
            raise ValueError(f"unknown parameter(s) {sorted(p)}")
        if not 1 <= self.channel <= len(settings.channel_names):
            raise ValueError(f"channel must be 1..{len(settings.channel_names)}")
        if self.full_scale <= 0.0 or self.deadband < 0.0 or not 0.0 <= self.threshold <= self.max_amp:
            raise ValueError("full_scale_deg > 0, deadband_deg >= 0 and 0 <= threshold_ma <= max_amplitude_ma")
        self.neutral = None
        self.elevation = self.command = self.amp = 0.0

    def step(self, tick, time_s, frame):
        if frame is None:
            return []
        angle = float(frame["q"][0][self.dof])
        if self.neutral is None:
            self.neutral = angle
        self.elevation = angle - self.neutral
        self.command = min(1.0, max(0.0, (self.elevation - self.deadband) / self.full_scale))
        self.amp = self.threshold + self.command * (self.max_amp - self.threshold) if self.command > 0.0 else 0.0
        return [ChannelCommand(self.channel, self.pw, self.amp, self.freq)]

    def state(self):
        return {"elevation_deg": math.degrees(self.elevation), "command": self.command, "amplitude_ma": self.amp}
