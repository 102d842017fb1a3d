"""Sensors a lab has: IMUs on the upper arm and forearm, joint encoders, and the evoked EMG (M-wave) of each
stimulation channel. Each is configured by its own table (``[sensor.imu]``, ``[sensor.encoder]``,
``[sensor.emg]``); a run without them has the plain frame of :func:`drivers.core.contract.frame_dtype`, and a
run with them appends their fields (:func:`lab_frame_dtype`) to it.

**IMU** (one on the humerus, one on the radius: it turns with pronation, as a sensor strapped to the distal
forearm does). Segment f's orientation in the thorax (= world: the thorax is fixed) follows the model's chain
(:mod:`sim.das3.kinematics`): R_(j+1) = R_j exp([a_j]x q_j). Its angular rate in its own frame is
w = R_f^T sum_(j<f) R_(j+1) a_j qdot_j. At the IMU's rate fs (sample and hold, then ``latency`` later):

    gyro   = w + b + n_w,    n_w ~ N(0, (N sqrt(fs))^2) per axis   (angle random walk N; IEEE Std 952-1997)
    b[k+1] = exp(-dt/T) b[k] + sigma_b sqrt(1 - exp(-2 dt/T)) n      (first-order Gauss-Markov, dt = 1/fs)
    quat   = dq(theta) (x) q_true,  theta ~ N(0, diag(s_rp, s_h, s_rp)^2) about the thorax x, y (up), z

The Gauss-Markov bias's Allan deviation peaks at 0.6174 sigma_b at tau = 1.89 T (its Allan variance: Zhang 2008,
Metrologia 45:549, for the AR(1) sampled process; :func:`gauss_markov_sigma`): sigma_b is set so the peak equals the
datasheet's in-run bias stability, read as the Allan floor (a *proposal*; IEEE 952's coefficient B would be
floor / 0.664). The orientation noise is white per sample (the datasheet's RMS accuracy; a real filter's
error is correlated: *proposal*).

**Encoder**: counts = round(q / (2 pi / counts_per_rev)) of each listed joint.

**Evoked EMG**: the M-wave amplitude of channel c at its latest pulse, 0 when it is off (*proposal* after
Erfanian, Chizeck & Hashemi 1998, IEEE TBME 45:188-202, and Chesler & Durfee 1997, J Electromyogr Kinesiol
7:27-37, where amplitude tracked FES fatigue)::

    M_c = M_max g_c r_c (1 - c_M (1 - phi_c)) + n,   n ~ N(0, noise^2)

r_c the channel's recruitment (:func:`hil.rt.stimulation.recruitment`), phi_c its fitness
(:mod:`hil.rt.fatigue`; 1 without fatigue), g_c the share of its muscle gains on innervated elements (0 when
all are denervated). Caution: in paralysed muscle the M-wave can recover while force stays low (Shields et
al. 1998, Muscle Nerve 21:776-787) or even grow as force falls; c_M is a parameter to sweep, not a fact.

Noise comes from a splitmix64 generator kept in the sensor's state, seeded from ``[sensor] seed``, so a run's
frames replay bit for bit.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from drivers.core.contract import ENCODER_PREFIX, sensor_frame_dtype
from hil.rt.stimulation import AMP_SCALE, PW_SCALE
from sim.config_schema import Derived, Key, Section, from_deg, from_milli, from_ms
from sim.das3.model import DOF_NAMES, HUMERUS_FRAME, RADIUS_FRAME, excitation_gate
from sim.jit.kernel import kernel

#: IMU presets: datasheet figures (file units). MTi-300: Movella MTi-300 datasheet (May 2023): gyro noise
#: density 0.01 deg/s/sqrt(Hz), in-run bias stability 10 deg/h, roll/pitch 0.2 deg RMS, heading 1 deg RMS.
#: rate_hz and latency_ms are *proposals* (a common logging rate; the datasheet text found gives no latency).
IMU_PRESETS = {"mti-300": {"rate_hz": 100.0, "latency_ms": 2.0, "gyro_noise_deg_s_rthz": 0.01,
                           "gyro_bias_instability_deg_h": 10.0, "gyro_bias_correlation_s": 100.0,
                           "roll_pitch_noise_deg": 0.2, "heading_noise_deg": 1.0}}
SEGMENT_FRAMES = (HUMERUS_FRAME, RADIUS_FRAME)
"""The model frame of each of :data:`drivers.core.contract.IMU_SEGMENTS`."""
GM_PEAK, GM_PEAK_TAU = 0.6174, 1.8926
"""Peak of a unit first-order Gauss-Markov process's Allan deviation and its tau / T (:func:`gauss_markov_sigma`)."""


def _preset(name: str) -> Derived:
    return Derived("the preset's", lambda read: IMU_PRESETS[read["model"]][name])


def _per_hour(value: float) -> float:
    """deg/h -> rad/s."""
    return math.radians(value) / 3600.0


IMU_SCHEMA = Section("sensor.imu", "IMUs on the upper arm (humerus) and forearm (radius): orientation quaternion "
                     "in the thorax frame and angular rate in the sensor frame (docs: lab sensors).", (
    Key("model", "string", "mti-300", "datasheet preset whose figures are the defaults below",
        choices=tuple(IMU_PRESETS)),
    Key("rate_hz", "number", _preset("rate_hz"), "output rate (at most the loop rate)", lo=0.0, hi=10000.0,
        lo_exclusive=True),
    Key("latency_ms", "number", _preset("latency_ms"), "delay of every sample, rounded to whole ticks",
        lo=0.0, hi=1000.0, field="latency_s", to_si=from_ms),
    Key("gyro_noise_deg_s_rthz", "number", _preset("gyro_noise_deg_s_rthz"), "gyro noise density N "
        "(angle random walk)", lo=0.0, hi=10.0, field="gyro_noise", to_si=from_deg, unit="deg/s/√Hz"),
    Key("gyro_bias_instability_deg_h", "number", _preset("gyro_bias_instability_deg_h"), "in-run bias "
        "stability: the Allan-deviation floor of the bias", lo=0.0, hi=36000.0, field="gyro_bias_instability",
        to_si=_per_hour, unit="deg/h"),
    Key("gyro_bias_correlation_s", "number", _preset("gyro_bias_correlation_s"), "correlation time T of the "
        "Gauss-Markov bias (its floor is at 1.89 T)", lo=0.0, hi=1e6, lo_exclusive=True),
    Key("roll_pitch_noise_deg", "number", _preset("roll_pitch_noise_deg"), "orientation noise about the "
        "thorax's horizontal axes (x, z), RMS", lo=0.0, hi=45.0, field="roll_pitch_noise", to_si=from_deg),
    Key("heading_noise_deg", "number", _preset("heading_noise_deg"), "orientation noise about the thorax's "
        "vertical axis (y), RMS", lo=0.0, hi=45.0, field="heading_noise", to_si=from_deg),
))

ENCODER_SCHEMA = Section("sensor.encoder", "Joint encoders: each listed joint's angle in integer counts.", (
    Key("joints", "strings", ["ELx"], "the joints (DAS3 DOF names)", choices=DOF_NAMES),
    Key("counts_per_rev", "integer", 4096, "counts per revolution (4096: a 12-bit encoder, a *proposal*)",
        lo=2, hi=2**31 - 1),
))

EMG_SCHEMA = Section("sensor.emg", "Evoked EMG: each stimulation channel's M-wave amplitude, M = M_max g r "
                     "(1 - c_M (1 - fitness)) + noise (docs: lab sensors).", (
    Key("m_max_mv", "number", 10.0, "M-wave amplitude at full recruitment of a rested channel (a *proposal*)",
        lo=0.0, hi=100.0, lo_exclusive=True, field="m_max_v", to_si=from_milli, unit="mV"),
    Key("fatigue_coupling", "number", 0.5, "c_M: the share of force fatigue the M-wave shows (a *proposal*; "
        "sweep 0-1)", lo=0.0, hi=1.0),
    Key("noise_mv", "number", 0.0, "standard deviation of the amplitude noise (while stimulated)", lo=0.0,
        hi=100.0, field="noise_v", to_si=from_milli, unit="mV"),
))
LAB_SECTIONS = {"imu": IMU_SCHEMA, "encoder": ENCODER_SCHEMA, "emg": EMG_SCHEMA}


@dataclass(frozen=True)
class ImuConfig:
    model: str
    rate_hz: float
    latency_s: float
    gyro_noise: float                # rad/s/sqrt(Hz)
    gyro_bias_instability: float     # rad/s (Allan floor)
    gyro_bias_correlation_s: float
    roll_pitch_noise: float          # rad
    heading_noise: float             # rad


@dataclass(frozen=True)
class EncoderConfig:
    joints: tuple[str, ...]
    counts_per_rev: int


@dataclass(frozen=True)
class EmgConfig:
    m_max_v: float
    fatigue_coupling: float
    noise_v: float


@dataclass(frozen=True)
class LabSensorsConfig:
    imu: ImuConfig | None = None
    encoder: EncoderConfig | None = None
    emg: EmgConfig | None = None

    @property
    def any(self) -> bool:
        return self.imu is not None or self.encoder is not None or self.emg is not None


LAB_KEYS = tuple(Key(name, "value", None, f"`[sensor.{name}]`: {what} (absent: none)") for name, what in (
    ("imu", "IMUs on the upper arm and forearm"), ("encoder", "joint encoders"), ("emg", "the evoked EMG")))
"""The sub-tables as keys of ``[sensor]`` (read raw; :func:`read_lab_sensors` checks them)."""


def read_lab_sensors(tables: dict, table_class, file) -> LabSensorsConfig:
    """The ``[sensor.imu]``, ``[sensor.encoder]``, ``[sensor.emg]`` sub-tables (``tables``: name -> the raw table or
    None; ``table_class`` reads one: ConfigTable); an absent sub-table is no such sensor."""
    made = {}
    for name, (section, cls) in {"imu": (IMU_SCHEMA, ImuConfig), "encoder": (ENCODER_SCHEMA, EncoderConfig),
                                 "emg": (EMG_SCHEMA, EmgConfig)}.items():
        if tables.get(name) is not None:
            sub = table_class(tables[name], f"sensor.{name}", file)
            made[name] = sub.build(section, cls)
            joints = getattr(made[name], "joints", ("x",))
            if not joints or len(set(joints)) < len(joints):
                raise sub.error("joints", f"must list each joint once (at least one), not {list(joints)!r}")
    return LabSensorsConfig(**made)


def gauss_markov_sigma(floor: float) -> float:
    """sigma_b of a first-order Gauss-Markov bias whose Allan deviation peaks at ``floor``. The Allan variance
    of the process (variance sigma^2, correlation time T) is sigma^2 (2/x) (1 - (3 - 4 e^-x + e^-2x)/(2x)),
    x = tau/T (the continuous-time limit of Zhang 2008, Metrologia 45:549, AR(1)); its maximum over x, found
    numerically, is GM_PEAK^2 at x = GM_PEAK_TAU."""
    return floor / GM_PEAK


def lab_frame_dtype(base: np.dtype, config: LabSensorsConfig, n_channels: int) -> np.dtype:
    """``base`` with the configured sensors' fields (:func:`drivers.core.contract.sensor_frame_dtype`)."""
    return sensor_frame_dtype(base, config.imu is not None, () if config.encoder is None else config.encoder.joints,
                              0 if config.emg is None else max(n_channels, 1))


# -- the compiled part ------------------------------------------------------------------------------
@kernel
def _uniform(rng):
    """A uniform draw in (0, 1] on the (1,) uint64 state ``rng``: SplitMix's golden-gamma counter (Steele, Lea &
    Flood 2014, OOPSLA, doi:10.1145/2660193.2660195) with the common splitmix64 finaliser constants."""
    rng[0] += np.uint64(0x9E3779B97F4A7C15)
    z = rng[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (float(z >> np.uint64(11)) + 1.0) * (1.0 / 9007199254740992.0)


@kernel
def next_normal(rng):
    """A standard normal draw (Box-Muller, cosine branch, on two uniforms in (0, 1])."""
    u = _uniform(rng)
    return math.sqrt(-2.0 * math.log(u)) * math.cos(2.0 * math.pi * _uniform(rng))


@kernel
def gyro_noise(bias, s, rng, params):
    """IMU s's Gauss-Markov bias one sample on: b = phi b + step n (``params``: :meth:`LabSensors.imu_params`)."""
    phi, step = params[2], params[3]
    for i in range(3):
        bias[s, i] = phi * bias[s, i] + step * next_normal(rng)


@kernel
def gyro_record(params, rng, bias, out):
    """``out`` (n, 3): n samples of a resting IMU's gyro (noise and bias only), as the tick draws them."""
    for k in range(out.shape[0]):
        gyro_noise(bias, 0, rng, params)
        for i in range(3):
            out[k, i] = bias[0, i] + params[1] * next_normal(rng)


@kernel
def _quat_from_matrix(R, f, out, s):
    """Unit quaternion (w, x, y, z; w >= 0) of rotation matrix R[f] into out[s] (Shepperd's method)."""
    m00, m11, m22 = R[f, 0, 0], R[f, 1, 1], R[f, 2, 2]
    tr = m00 + m11 + m22
    if tr > 0.0:
        k = 2.0 * math.sqrt(tr + 1.0)
        w, x, y, z = 0.25 * k, (R[f, 2, 1] - R[f, 1, 2]) / k, (R[f, 0, 2] - R[f, 2, 0]) / k, (R[f, 1, 0] - R[f, 0, 1]) / k
    elif m00 > m11 and m00 > m22:
        k = 2.0 * math.sqrt(1.0 + m00 - m11 - m22)
        w, x, y, z = (R[f, 2, 1] - R[f, 1, 2]) / k, 0.25 * k, (R[f, 0, 1] + R[f, 1, 0]) / k, (R[f, 0, 2] + R[f, 2, 0]) / k
    elif m11 > m22:
        k = 2.0 * math.sqrt(1.0 + m11 - m00 - m22)
        w, x, y, z = (R[f, 0, 2] - R[f, 2, 0]) / k, (R[f, 0, 1] + R[f, 1, 0]) / k, 0.25 * k, (R[f, 1, 2] + R[f, 2, 1]) / k
    else:
        k = 2.0 * math.sqrt(1.0 + m22 - m00 - m11)
        w, x, y, z = (R[f, 1, 0] - R[f, 0, 1]) / k, (R[f, 0, 2] + R[f, 2, 0]) / k, (R[f, 1, 2] + R[f, 2, 1]) / k, 0.25 * k
    sign = -1.0 if w < 0.0 else 1.0
    out[s, 0], out[s, 1], out[s, 2], out[s, 3] = sign * w, sign * x, sign * y, sign * z


@kernel
def segment_rotations(axis, q, R, last):
    """R[j+1] = R[j] exp([axis_j]x q_j) (Rodrigues) for j < ``last``, R[0] = I (thorax)."""
    for a in range(3):
        for b in range(3):
            R[0, a, b] = 1.0 if a == b else 0.0
    for j in range(last):
        kx, ky, kz = axis[j, 0], axis[j, 1], axis[j, 2]
        s, c = math.sin(q[j]), 1.0 - math.cos(q[j])
        # E = I + s K + c K^2, K = [k]x
        e00, e01, e02 = 1.0 - c * (ky * ky + kz * kz), -s * kz + c * kx * ky, s * ky + c * kx * kz
        e10, e11, e12 = s * kz + c * kx * ky, 1.0 - c * (kx * kx + kz * kz), -s * kx + c * ky * kz
        e20, e21, e22 = -s * ky + c * kx * kz, s * kx + c * ky * kz, 1.0 - c * (kx * kx + ky * ky)
        for a in range(3):
            r0, r1, r2 = R[j, a, 0], R[j, a, 1], R[j, a, 2]
            R[j + 1, a, 0] = r0 * e00 + r1 * e10 + r2 * e20
            R[j + 1, a, 1] = r0 * e01 + r1 * e11 + r2 * e21
            R[j + 1, a, 2] = r0 * e02 + r1 * e12 + r2 * e22


@kernel
def _imu_sample(q, qdot, axis, frames, R, params, bias, rng, held):
    """One sample of both IMUs into ``held`` (2, 7): quaternion (noisy) and gyro (true + bias + noise)."""
    segment_rotations(axis, q, R, frames[1])
    for s in range(2):
        f = frames[s]
        wx = wy = wz = 0.0
        for j in range(f):      # world angular velocity: sum of R_(j+1) a_j qdot_j
            for a in range(3):
                v = (R[j + 1, a, 0] * axis[j, 0] + R[j + 1, a, 1] * axis[j, 1] + R[j + 1, a, 2] * axis[j, 2]) * qdot[j]
                if a == 0:
                    wx += v
                elif a == 1:
                    wy += v
                else:
                    wz += v
        gyro_noise(bias, s, rng, params)
        for i in range(3):     # body frame: R_f^T w
            held[s, 4 + i] = (R[f, 0, i] * wx + R[f, 1, i] * wy + R[f, 2, i] * wz + bias[s, i]
                              + params[1] * next_normal(rng))
        _quat_from_matrix(R, f, held[:, :4], s)
        tx, ty, tz = params[4] * next_normal(rng), params[5] * next_normal(rng), params[4] * next_normal(rng)
        angle = math.sqrt(tx * tx + ty * ty + tz * tz)
        if angle > 0.0:         # held <- dq (x) held, dq the rotation by (tx, ty, tz) in the thorax frame
            h = math.sin(0.5 * angle) / angle
            dw, dx, dy, dz = math.cos(0.5 * angle), tx * h, ty * h, tz * h
            w, x, y, z = held[s, 0], held[s, 1], held[s, 2], held[s, 3]
            nw, nx = dw * w - dx * x - dy * y - dz * z, dw * x + dx * w + dy * z - dz * y
            ny, nz = dw * y - dx * z + dy * w + dz * x, dw * z + dx * y - dy * x + dz * w
            norm = math.sqrt(nw * nw + nx * nx + ny * ny + nz * nz)
            sign = -1.0 if nw < 0.0 else 1.0
            held[s, 0], held[s, 1], held[s, 2], held[s, 3] = (sign * nw / norm, sign * nx / norm, sign * ny / norm,
                                                              sign * nz / norm)


@kernel
def lab_tick(tick, q, qdot, imu, encoder, emg, rng):
    """Every configured lab sensor for tick ``tick`` from the true joint state (see the module docstring);
    an unconfigured sensor has empty arrays. ``imu`` = (params, axis, frames, R scratch, bias, last sample (1,),
    ring (depth, 2, 7), quat out (2, 4), gyro out (2, 3)); ``encoder`` = (joint indices, counts per rad, out);
    ``emg`` = (applied (channels, 4), recruitment params (pw scale, amp scale, m_max, c_M, noise), q_th, q_sat,
    innervated share, fitness, out)."""
    params, axis, frames, R, bias, last, ring, quat, gyro = imu
    if params.shape[0]:
        depth = ring.shape[0]
        sample = np.int64(math.floor((tick + 1) * params[6] * params[0] + 1e-9))
        slot = tick % depth
        if tick == 0 or sample > last[0]:
            last[0] = sample
            _imu_sample(q, qdot, axis, frames, R, params, bias, rng, ring[slot])
        else:
            prev = (tick - 1) % depth
            for s in range(2):
                for i in range(7):
                    ring[slot, s, i] = ring[prev, s, i]
        src = max(tick - np.int64(params[7]), 0) % depth
        for s in range(2):
            for i in range(4):
                quat[s, i] = ring[src, s, i]
            for i in range(3):
                gyro[s, i] = ring[src, s, 4 + i]
    joints, per_rad, counts = encoder
    for i in range(joints.shape[0]):
        counts[i] = np.rint(q[joints[i]] * per_rad[0])
    applied, p, q_th, q_sat, share, fitness, mwave = emg
    for c in range(q_th.shape[0]):
        if applied[c, 2] <= 0.0:
            mwave[c] = 0.0
            continue
        x = (applied[c, 0] * p[0] * applied[c, 1] * p[1] - q_th[c]) / (q_sat[c] - q_th[c])
        x = min(1.0, max(0.0, x))
        r = x * x * (3.0 - 2.0 * x)
        if r <= 0.0 or share[c] <= 0.0:
            mwave[c] = 0.0
            continue
        mwave[c] = p[2] * share[c] * r * (1.0 - p[3] * (1.0 - fitness[c]))
        if p[4] > 0.0:
            mwave[c] += p[4] * next_normal(rng)


def no_lab_arrays() -> tuple:
    """:attr:`LabSensors.kernel_arrays` of a run without lab sensors (empty arrays: :func:`lab_tick` does nothing)."""
    return _empty_imu(), (np.zeros(0, np.int64), np.ones(1), np.zeros(0)), _empty_emg(), np.zeros(1, np.uint64)


def _empty_imu() -> tuple:
    z = np.zeros
    return (z(0), z((0, 3)), z(2, np.int64), z((1, 3, 3)), z((2, 3)), z(1, np.int64), z((1, 2, 7)), z((2, 4)),
            z((2, 3)))


def _empty_emg() -> tuple:
    z = np.zeros
    return z((0, 4)), z(5), z(0), z(0), z(0), z(0), z(0)


class LabSensors:
    """The configured lab sensors of a run, bound to its model, stimulation and frame: :meth:`step` fills their
    frame fields from the true joint state (one compiled call, preallocated state)."""

    def __init__(self, config: LabSensorsConfig, seed: int) -> None:
        self.config = config
        self.seed = seed
        self.imu, self.encoder, self.emg, self.rng = no_lab_arrays()      # until bound (:meth:`bind`)
        self._bias0 = np.zeros((2, 3))

    def bind(self, frame: np.ndarray, model, stimulation, applied: np.ndarray, fitness: np.ndarray,
             period_s: float) -> None:
        """Take the run's model (its joint axes, denervated elements), stimulation model (None: direct
        excitation), applied-channel rows and fitness (views the engine updates every tick) and the frame
        (1 element of :func:`lab_frame_dtype`) whose fields to fill. ValueError on a sensor the run cannot have."""
        c = self.config
        f = frame[0]
        if c.imu is not None:
            axis = model.segment_model.arrays.joint_axis       # the MTG arm's q too is in DAS3 order
            if c.imu.rate_hz * period_s > 1.0 + 1e-9:
                raise ValueError(f"sensor.imu.rate_hz = {c.imu.rate_hz:g} exceeds the loop rate {1 / period_s:g} Hz")
            delay = int(round(c.imu.latency_s / period_s))
            self.imu = (self.imu_params(c.imu, period_s, delay), np.ascontiguousarray(axis, np.float64),
                        np.array(SEGMENT_FRAMES, np.int64), np.zeros((RADIUS_FRAME + 1, 3, 3)),
                        np.zeros((2, 3)), np.zeros(1, np.int64), np.zeros((delay + 1, 2, 7)), f["imu_quat"],
                        f["imu_gyro"])
        if c.encoder is not None:
            first = frame.dtype.fields[ENCODER_PREFIX + c.encoder.joints[0]][1]     # consecutive float64 fields
            counts = frame.view(np.uint8)[first:first + 8 * len(c.encoder.joints)].view("<f8")
            self.encoder = (np.array([DOF_NAMES.index(j) for j in c.encoder.joints], np.int64),
                            np.array([c.encoder.counts_per_rev / (2.0 * math.pi)]), counts)
        if c.emg is not None:
            if stimulation is None:
                raise ValueError("[sensor.emg] needs stimulation channels ([stimulation] mode is direct)")
            gate = excitation_gate(tuple(getattr(model.config, "denervated", ())), tuple(model.muscle_names))
            gains = stimulation.gains
            total = gains.sum(axis=1)
            share = np.divide(gains @ gate, total, out=np.zeros(len(total)), where=total > 0)
            self.emg = (applied, np.array([PW_SCALE, AMP_SCALE, c.emg.m_max_v, c.emg.fatigue_coupling,
                                           c.emg.noise_v]), stimulation.q_th, stimulation.q_sat, share, fitness,
                        f["emg_mwave"][:stimulation.n_channels])
        self.reset()

    @staticmethod
    def imu_params(imu: ImuConfig, period_s: float, delay_ticks: int) -> np.ndarray:
        """(8,): rate, white-noise sigma per sample N sqrt(fs), Gauss-Markov factor exp(-dt/T) and step sigma,
        roll/pitch and heading sigma, tick period, latency in ticks."""
        dt = 1.0 / imu.rate_hz
        phi = math.exp(-dt / imu.gyro_bias_correlation_s)
        sigma_b = gauss_markov_sigma(imu.gyro_bias_instability)
        return np.array([imu.rate_hz, imu.gyro_noise * math.sqrt(imu.rate_hz), phi,
                         sigma_b * math.sqrt(1.0 - phi * phi), imu.roll_pitch_noise, imu.heading_noise, period_s,
                         float(delay_ticks)])

    def reset(self) -> None:
        """The generator seeded again, the IMU biases drawn from their stationary distribution."""
        self.rng[0] = np.random.SeedSequence([self.seed, 37]).generate_state(1, np.uint64)[0]
        params, bias, last, ring = self.imu[0], self.imu[4], self.imu[5], self.imu[6]
        last[0] = -1
        ring[...] = 0.0
        if params.shape[0]:
            sigma_b = params[3] / math.sqrt(1.0 - params[2] ** 2) if params[2] < 1.0 else 0.0
            for s in range(2):
                for i in range(3):
                    bias[s, i] = sigma_b * next_normal(self.rng)

    def step(self, tick: int, q: np.ndarray, qdot: np.ndarray) -> None:
        """Fill the lab sensors' frame fields for ``tick`` from the true q, q-dot (before any frame noise)."""
        lab_tick(tick, q, qdot, self.imu, self.encoder, self.emg, self.rng)

    @property
    def kernel_arrays(self) -> tuple:
        """(imu, encoder, emg, rng): what :func:`lab_tick` takes after the joint state, for the compiled tick
        (:mod:`hil.rt.tick_kernel`), bound (:meth:`bind`) and then never replaced, only changed in place."""
        return self.imu, self.encoder, self.emg, self.rng

    def reading_before_start(self, q: np.ndarray, qdot: np.ndarray, frame: np.ndarray) -> None:
        """The sensors' noise-free reading of the state (q, q-dot) into the lab fields of ``frame`` (1 element), with
        no sample taken (the sampling state, the biases and the generator stay as they are): what a Gymnasium reset
        observes before the first tick, where a frame's lab fields would otherwise still be zeros (no quaternion).
        The IMUs' segment orientations and rates, the encoders' counts; no M-wave without stimulation."""
        params = self.imu[0].copy()
        if params.shape[0]:
            params[[1, 3, 4, 5]] = 0.0                    # gyro noise, bias step, orientation noise
            held = np.zeros((2, 7))
            _imu_sample(q, qdot, self.imu[1], self.imu[2], np.zeros_like(self.imu[3]), params, np.zeros((2, 3)),
                        self.rng.copy(), held)
            frame["imu_quat"][0], frame["imu_gyro"][0] = held[:, :4], held[:, 4:]
        joints, per_rad, _ = self.encoder
        for joint, i in zip(self.config.encoder.joints if self.config.encoder else (), joints.tolist()):
            frame[ENCODER_PREFIX + joint][0] = np.rint(q[i] * per_rad[0])
        if self.config.emg is not None:
            frame["emg_mwave"][0] = 0.0
