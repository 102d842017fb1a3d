"""Sensor frames: what the virtual arm reports to a controller every tick.

A frame is one record of :func:`frame_dtype` (SI units, radians; degrees only at the edges). Optional,
seeded measurement models per config (:class:`SensorModel`): Gaussian noise on angles, velocities and
forces, quantisation of angles, and a delay of whole ticks. With the same seed and inputs a run's frames
are reproducible bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drivers.contract import frame_dtype
from sim.model import DOF_NAMES

ELBOW, PRONATION = DOF_NAMES.index("ELx"), DOF_NAMES.index("PSy")

@dataclass(frozen=True)
class SensorModelConfig:
    seed: int = 0
    angle_noise_rad: float = 0.0     # standard deviation
    velocity_noise_rad_s: float = 0.0
    force_noise_n: float = 0.0
    angle_quantum_rad: float = 0.0   # 0 = no quantisation
    delay_ticks: int = 0


class SensorModel:
    """Fills frames from plant outputs and applies the configured measurement model (no allocation
    per tick beyond numpy's in-place random draws into preallocated buffers)."""

    def __init__(self, config: SensorModelConfig, dtype: np.dtype | None = None) -> None:
        self.config = config
        self.dtype = dtype or frame_dtype()
        self.rng = np.random.Generator(np.random.PCG64(config.seed))
        self.true_frame = np.zeros(1, self.dtype)
        self._history = np.zeros(config.delay_ticks + 1, self.dtype)
        self._nq = np.zeros(self.dtype["q"].shape[0])
        self._n3 = np.zeros(3)
        self._noisy = (config.angle_noise_rad > 0 or config.velocity_noise_rad_s > 0
                       or config.force_noise_n > 0 or config.angle_quantum_rad > 0)
        # field views resolved once: a slice copy into a view is several times cheaper per tick than a
        # structured-record field assignment
        f = self.true_frame
        self._views = tuple(f[name][0] for name in ("q", "qdot", "th_angles", "hand_position", "gh_force",
                                                    "st_contact_force"))
        self._scalars = {name: f[name] for name in ("tick", "time", "elbow_flexion", "forearm_pronation",
                                                    "gh_stability", "status")}
        self._in_contact = f["st_in_contact"][0]

    def reset(self) -> None:
        self.rng = np.random.Generator(np.random.PCG64(self.config.seed))
        self._history[:] = np.zeros(1, self.dtype)

    def measure(self, tick: int, time_s: float, outputs, status: int) -> np.ndarray:
        """The frame for this tick (a 1-element view valid until the next call)."""
        q, qdot, th, hand, gh_force, st_force = self._views
        q[:] = outputs.q
        qdot[:] = outputs.qdot
        th[:] = outputs.th_angles
        hand[:] = outputs.hand_position
        gh_force[:] = outputs.gh_force
        st_force[:] = outputs.st_contact_force
        sc = self._scalars
        sc["tick"][0] = tick
        sc["time"][0] = time_s
        sc["elbow_flexion"][0] = q[ELBOW]
        sc["forearm_pronation"][0] = q[PRONATION]
        sc["gh_stability"][0] = outputs.gh_stability
        sc["status"][0] = status
        for i in range(2):     # in contact: the contact force is more than 1 N (sum of |components|)
            self._in_contact[i] = abs(st_force[i, 0]) + abs(st_force[i, 1]) + abs(st_force[i, 2]) > 1.0
        if self._noisy:
            self._apply_noise()
        if self.config.delay_ticks == 0:
            return self.true_frame
        # a delayed sensor: the frame sent at tick k is the one measured at tick k - delay (the first
        # frame until then); its tick and time fields say when it was measured
        n = self._history.shape[0]
        self._history[tick % n] = self.true_frame[0]
        src = max(tick - self.config.delay_ticks, 0) % n
        return self._history[src:src + 1]

    def _apply_noise(self) -> None:
        """Gaussian noise (standard deviations from the config) on q, the thoracohumeral angles (measured
        on their own, e.g. by IMUs), q-dot and the GH force; then angles quantised to ``angle_quantum``.
        In place on preallocated buffers (no allocation in the tick)."""
        c = self.config
        q, qdot, th, _, gh_force, _ = self._views
        nq, n3 = self._nq, self._n3
        if c.angle_noise_rad > 0:
            self._add_noise(q, nq, c.angle_noise_rad)
            self._add_noise(th, n3, c.angle_noise_rad)
        if c.velocity_noise_rad_s > 0:
            self._add_noise(qdot, nq, c.velocity_noise_rad_s)
        if c.force_noise_n > 0:
            self._add_noise(gh_force, n3, c.force_noise_n)
        if c.angle_quantum_rad > 0:
            for angles in (q, th):
                np.divide(angles, c.angle_quantum_rad, out=angles)
                np.round(angles, out=angles)
                np.multiply(angles, c.angle_quantum_rad, out=angles)
        sc = self._scalars
        sc["elbow_flexion"][0] = q[ELBOW]
        sc["forearm_pronation"][0] = q[PRONATION]

    def _add_noise(self, values: np.ndarray, scratch: np.ndarray, std: float) -> None:
        self.rng.standard_normal(out=scratch)
        np.multiply(scratch, std, out=scratch)
        np.add(values, scratch, out=values)
