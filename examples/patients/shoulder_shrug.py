"""An example voluntary plug-in (``role = "voluntary"``): the patient's own shoulder shrug, played as a
repeating excitation pattern of the shoulder elevators a C5 patient retains (hil.rt.voluntary).

Load it from a service config (configs/c5-shoulder-command.toml)::

    [[driver]]
    type = "loopback"
    role = "voluntary"
    controller = "../examples/patients/shoulder_shrug.py:ShoulderShrug"
    groups = ["trapclav", "levscap"]
    peak = 0.4

The pattern, repeated every ``rest_s + rise_s + hold_s + fall_s``: rest, a linear rise to ``peak``, a hold,
a linear fall (the shoulder depresses under gravity as the elevators relax); its timing and level are this
example's choices (*proposal*). The upper trapezius and levator
scapulae elevate the shoulder girdle (innervation C3-C4 and XI: docs/concepts/patients.md, roots table).
"""
from __future__ import annotations

from drivers.controllers.plugin import Controller, ExcitationCommand


class ShoulderShrug(Controller):
    max_commands = 28

    def reset(self, settings):
        super().reset(settings)
        p = dict(settings.params)
        self.groups = [str(g) for g in p.pop("groups", ["trapclav", "levscap"])]
        self.peak = float(p.pop("peak", 0.4))
        self.rest = float(p.pop("rest_s", 1.0))
        self.rise = float(p.pop("rise_s", 1.0))
        self.hold = float(p.pop("hold_s", 1.0))
        self.fall = float(p.pop("fall_s", 1.0))
        if p:
            raise ValueError(f"unknown parameter(s) {sorted(p)}")
        unknown = [g for g in self.groups if g not in settings.group_names]
        if unknown or not self.groups:
            raise ValueError(f"groups must be muscle groups of the model, not {unknown or self.groups}")
        if not 0.0 <= self.peak <= 1.0 or min(self.rest, self.rise, self.hold, self.fall) < 0.0:
            raise ValueError("peak must be in [0, 1] and the phase durations >= 0")
        if len(self.groups) > self.max_commands:
            raise ValueError(f"at most {self.max_commands} groups")
        self.u = 0.0

    def level(self, time_s: float) -> float:
        """The pattern's excitation at ``time_s``."""
        cycle = self.rest + self.rise + self.hold + self.fall
        t = time_s % cycle if cycle > 0.0 else 0.0
        if t < self.rest:
            return 0.0
        t -= self.rest
        if t < self.rise:
            return self.peak * t / self.rise
        t -= self.rise
        if t < self.hold:
            return self.peak
        return self.peak * max(0.0, 1.0 - (t - self.hold) / self.fall) if self.fall > 0.0 else 0.0

    def step(self, tick, time_s, frame):
        self.u = self.level(time_s)
        return [ExcitationCommand(g, self.u) for g in self.groups]

    def state(self):
        return {"u": self.u}
