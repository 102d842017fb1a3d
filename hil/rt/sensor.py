"""Sensor frames: what the virtual arm reports to a controller every tick.

A frame is one record of :func:`frame_dtype` (SI units, radians; degrees only at the edges). Optional,
seeded measurement models per config (:class:`SensorModel`): Gaussian noise on angles, velocities and
forces, quantisation of angles, and a delay of whole ticks. With the same seed and inputs a run's frames
are reproducible bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from drivers.core.config_table import ConfigTable
from drivers.core.contract import frame_dtype
from hil.rt.lab_sensors import LAB_KEYS, LabSensors, LabSensorsConfig, lab_frame_dtype, no_lab_arrays, read_lab_sensors
from sim.config_schema import Key, Section, from_deg, from_ms
from sim.das3.model import DOF_NAMES
from sim.jit.kernel import kernel

ELBOW, PRONATION = DOF_NAMES.index("ELx"), DOF_NAMES.index("PSy")
CONTACT_MIN_N = 1.0
"""A scapulothoracic contact point is in contact when its force exceeds this (sum of |components|, N)."""


@kernel
def fill_true_frame(views, tick, time_s, q, qdot, th_angles, hand_position, gh_force, st_force, gh_stability):
    """The noise-free frame from plant outputs into ``views`` (:attr:`SensorModel.frame_views`), status
    aside; one compiled call (also made by the compiled tick, :mod:`hil.rt.tick_kernel`)."""
    vq, vqd, vth, vhand, vgh, vst, vtick, vtime, velbow, vpron, vstab, vcontact = views
    for i in range(q.shape[0]):
        vq[i] = q[i]
        vqd[i] = qdot[i]
    for i in range(3):
        vth[i] = th_angles[i]
        vhand[i] = hand_position[i]
        vgh[i] = gh_force[i]
    for n in range(2):
        for i in range(3):
            vst[n, i] = st_force[n, i]
        vcontact[n] = abs(st_force[n, 0]) + abs(st_force[n, 1]) + abs(st_force[n, 2]) > CONTACT_MIN_N
    vtick[0] = tick
    vtime[0] = time_s
    velbow[0] = q[ELBOW]
    vpron[0] = q[PRONATION]
    vstab[0] = gh_stability


SENSOR_SCHEMA = Section("sensor", "The seeded measurement model of the frames a controller receives.", (
    Key("seed", "integer", 0, "seed of the noise generator", lo=0, hi=2**63 - 1),
    Key("angle_noise_deg", "number", 0.0, "standard deviation of the Gaussian noise on angles", lo=0.0, hi=45.0,
        field="angle_noise_rad", to_si=from_deg),
    Key("velocity_noise_deg_s", "number", 0.0, "standard deviation of the Gaussian noise on angular velocities",
        lo=0.0, hi=1000.0, field="velocity_noise_rad_s", to_si=from_deg),
    Key("force_noise_n", "number", 0.0, "standard deviation of the Gaussian noise on forces", lo=0.0, hi=1000.0),
    Key("angle_quantum_deg", "number", 0.0, "angles are rounded to multiples of this (0: not quantised)",
        lo=0.0, hi=45.0, field="angle_quantum_rad", to_si=from_deg),
    Key("delay_ms", "number", 0.0, "frames are delayed by this, rounded to whole ticks", lo=0.0, hi=1000.0,
        field="delay_s", to_si=from_ms),
    *LAB_KEYS,
))


@dataclass(frozen=True)
class SensorModelConfig:
    seed: int = SENSOR_SCHEMA.default("seed")
    angle_noise_rad: float = SENSOR_SCHEMA.default("angle_noise_rad")
    velocity_noise_rad_s: float = SENSOR_SCHEMA.default("velocity_noise_rad_s")
    force_noise_n: float = SENSOR_SCHEMA.default("force_noise_n")
    angle_quantum_rad: float = SENSOR_SCHEMA.default("angle_quantum_rad")
    delay_ticks: int = 0     # round(delay_ms / period): the schema's delay_ms default is 0
    lab: LabSensorsConfig = LabSensorsConfig()    # [sensor.imu], [sensor.encoder], [sensor.emg]

    @classmethod
    def from_schema(cls, values: dict, period_s: float) -> "SensorModelConfig":
        """The config from ``ConfigTable.read(SENSOR_SCHEMA)``: delay_ticks = round(delay_s / period)."""
        fields = dict(values)
        delay_s = fields.pop("delay_s")
        return cls(**fields, delay_ticks=int(round(delay_s / period_s)))


def sensor_config(doc: dict, file, period_s: float) -> SensorModelConfig:
    """``[sensor]`` of a config document with its lab-sensor sub-tables (:mod:`hil.rt.lab_sensors`)."""
    table = ConfigTable.section(doc, "sensor", file)
    values = table.read(SENSOR_SCHEMA)
    table.done()
    lab = read_lab_sensors({key.name: values.pop(key.field) for key in LAB_KEYS}, ConfigTable, file)
    return SensorModelConfig.from_schema({**values, "lab": lab}, period_s)


class SensorModel:
    """Fills frames from plant outputs and applies the configured measurement model (no allocation
    per tick beyond numpy's in-place random draws into preallocated buffers)."""

    def __init__(self, config: SensorModelConfig, dtype: np.dtype | None = None, n_channels: int = 0) -> None:
        self.config = config
        self.dtype = dtype or lab_frame_dtype(frame_dtype(), config.lab, n_channels)
        self.lab = LabSensors(config.lab, config.seed) if config.lab.any else None
        """The lab sensors (IMU, encoders, evoked EMG), or None; :meth:`bind_run` before the first tick."""
        self.rng = np.random.Generator(np.random.PCG64(config.seed))
        self._history = np.zeros(config.delay_ticks + 1, self.dtype)
        self._nq = np.zeros(self.dtype["q"].shape[0])
        self._n3 = np.zeros(3)
        self._noisy = (config.angle_noise_rad > 0 or config.velocity_noise_rad_s > 0
                       or config.force_noise_n > 0 or config.angle_quantum_rad > 0)
        self.ideal = not self._noisy and config.delay_ticks == 0
        """No measurement model after the compiled tick (which runs the lab sensors): the frame sent is the true frame
        as filled."""
        self.use_frame(np.zeros(1, self.dtype))

    def use_frame(self, frame: np.ndarray) -> None:
        """Measure into ``frame`` (1 element of this dtype, e.g. the frame field of the tick engine's record,
        which then needs no copy); before the compiled fill takes :attr:`frame_views`."""
        if frame.shape != (1,) or frame.dtype != self.dtype:
            raise ValueError(f"a sensor frame is 1 element of {self.dtype}")
        self.true_frame = f = frame
        # field views resolved once, for the compiled fill (fill_true_frame) and the noise model
        self.frame_views = tuple(f[name][0] for name in ("q", "qdot", "th_angles", "hand_position", "gh_force",
                                                         "st_contact_force")) + tuple(
            f[name] for name in ("tick", "time", "elbow_flexion", "forearm_pronation", "gh_stability")) + (
            f["st_in_contact"][0],)
        self.status_view = f["status"]            # set by the compiled tick (hil.rt.tick_kernel) or measure
        self._elbow, self._pronation = f["elbow_flexion"], f["forearm_pronation"]

    def bind_run(self, model, stimulation, applied: np.ndarray, fitness: np.ndarray, period_s: float) -> None:
        """Give the lab sensors (if any) the run's model, stimulation, applied channels and fitness (views the
        engine updates) after :meth:`use_frame`; ValueError on a lab sensor the run cannot have."""
        if self.lab is not None:
            self.lab.bind(self.true_frame, model, stimulation, applied, fitness, period_s)

    def reset(self) -> None:
        self.rng = np.random.Generator(np.random.PCG64(self.config.seed))
        if self.lab is not None:
            self.lab.reset()
        self._history[:] = np.zeros(1, self.dtype)

    def measure(self, tick: int, time_s: float, outputs, status: int) -> np.ndarray:
        """The frame for this tick from plant outputs (a 1-element view valid until the next call)."""
        fill_true_frame(self.frame_views, tick, time_s, outputs.q, outputs.qdot, outputs.th_angles,
                        outputs.hand_position, outputs.gh_force, outputs.st_contact_force, outputs.gh_stability)
        self.status_view[0] = status
        if self.lab is not None:      # from the true joint state, before the frame's own noise
            self.lab.step(tick, self.frame_views[0], self.frame_views[1])
        return self.complete(tick)

    @property
    def lab_arrays(self) -> tuple:
        """The lab sensors' arguments of the compiled tick, which runs them after filling the true frame
        (:attr:`hil.rt.lab_sensors.LabSensors.kernel_arrays`; empty without lab sensors)."""
        return self.lab.kernel_arrays if self.lab is not None else no_lab_arrays()

    def complete(self, tick: int) -> np.ndarray:
        """The measurement model (noise, quantisation, delay) on the frame :func:`fill_true_frame` and the lab
        sensors filled for ``tick``, its status set (by the compiled tick, or :meth:`measure`). Returns the frame
        to send (a 1-element view)."""
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
        q, qdot, th, _, gh_force = self.frame_views[:5]
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
        self._elbow[0] = q[ELBOW]
        self._pronation[0] = q[PRONATION]

    def _add_noise(self, values: np.ndarray, scratch: np.ndarray, std: float) -> None:
        self.rng.standard_normal(out=scratch)
        np.multiply(scratch, std, out=scratch)
        np.add(values, scratch, out=values)
