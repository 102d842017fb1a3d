"""Stimulation -> neural excitation: what a surface stimulator channel does to the muscles under it.

For channel c with pulse width PW, amplitude I, frequency f and pulse mode m (ScienceMode: 0 single,
1 doublet, 2 triplet), and muscle element k:

    Q_c   = PW_c I_c                                             charge per pulse (C)
    x_c   = (Q_c - Q_th) / (Q_sat - Q_th)
    r_c   = 0 (x <= 0);  3 x^2 - 2 x^3 (0 < x < 1);  1 (x >= 1)     recruitment: sigmoidal in charge,
                                                                  C1-continuous (Crago et al. 1980;
                                                                  Durfee & MacLean 1989)
    f_eff = f (1 + g_d m)                                         doublets/triplets act like a higher
                                                                  rate (catch-like property)
    phi_c = min(1, (1 - exp(-f_eff/f_c)) / (1 - exp(-f_fuse/f_c)))  force-frequency: saturating at
                                                                  tetanic fusion f_fuse
    u_k   = clip(max_c G_ck r_c phi_c, 0, 1)                       gains G_ck in [0, 1] per channel
                                                                  (:mod:`sim.stimulation_map`)

Electrodes as they behave (both off by default):

- spill-over: a channel's current also recruits neighbouring muscles from a higher charge on (``spill``,
  ``spill_threshold_charge_uc``): r^s_c is r_c's curve shifted to Q_spill, with the channel's phi, delay and
  fitness, through its own gains S_ck (:mod:`sim.stimulation_map`);
- a session ("day") draw: every charge of channel c (Q_th, Q_sat, Q_spill) times F_c = exp(sigma z_c), z_c
  standard normal from the seed and the channel's index, sigma = sqrt(ln(1 + CV^2)) (log-normal with median 1
  and coefficient of variation CV): electrode placement and skin impedance change from day to day, which scales
  the current a given recruitment needs.

Default numbers (surface electrodes over arm muscles; see the README): Q_th = 5 uC (about 20 mA at
250 us), Q_sat = 24 uC (about 80 mA at 300 us), f_c = 12 Hz and f_fuse = 50 Hz (half force near 10 Hz,
fusion at 40-50 Hz), g_d = 0.5. They are modelling choices to be tuned per subject, not measured data.

Per-channel limits (pulse width, amplitude, frequency range, allowed modes) either reject a command
or clamp it, per channel policy; reasons are entries of ``drivers.core.contract.REJECT_REASONS``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from numba import njit

from drivers.core.config_table import REQUIRED, ConfigTable
from hil.rt.fatigue import DING2003, FATIGUE_MODELS, STATE_COLUMNS, channel_fitness, fatigue_tick, rested_state
from sim.config_schema import Derived, Key, Section, from_micro, from_milli
from sim.das3.config import ConfigError
from sim.das3.muscle_groups import element_indices, unknown_muscle
from sim.jit.kernel import kernel
from sim.stimulation_map import clip_unit, raise_to_level, recruit

HW_MAX_PULSE_WIDTH_US = 500.0   # RehaStim2 range
HW_MAX_AMPLITUDE_MA = 130.0
MAX_CHANNELS = 16
MAX_EMD_MS = 200.0              # electromechanical delays of surface FES are tens of ms


def default_channel_name(index: int) -> str:
    """The name of ``[[stimulation.channel]]`` number ``index`` (0-based) that gives none."""
    return f"ch{index + 1}"


STIMULATION_SCHEMA = Section("stimulation", "How commands become muscle excitations.", (
    Key("mode", "string", "channels", "`channels`: commands drive stimulation channels (the rule below); "
        "`direct`: commands set muscle excitations", choices=("channels", "direct")),
    Key("fatigue", "string", "none", "fatigue model of the stimulated muscles (hil.rt.fatigue)", choices=FATIGUE_MODELS),
    Key("fatigue_rate_scale", "number", 1.0, "multiplies the fatigue coefficients (1: published)", lo=0.0, hi=100.0),
    Key("session_seed", "integer", 0, "seed of the session's draw of recruitment thresholds (one 'day')",
        lo=0, hi=2**32 - 1),
    Key("session_threshold_cv", "number", 0.0, "coefficient of variation of the session's log-normal factor on "
        "each channel's charges (0: no draw)", lo=0.0, hi=1.0, field="session_cv"),
    Key("channel", "value", [], f"the channels, `[[stimulation.channel]]` (at most {MAX_CHANNELS}; channel mode "
        "needs one)", field="channels"),
))

CHANNEL_SCHEMA = Section("stimulation.channel", "One stimulation channel, `[[stimulation.channel]]`.", (
    Key("name", "string", Derived("`\"ch<n>\"` (n: its position from 1)", lambda read: None), "channel name, unique"),
    Key("muscles", "value", REQUIRED, "muscle element or group -> gain in [0, 1], e.g. {bicl = 1.0}",
        field="gains", to_si=dict),
    Key("modes", "value", [0, 1, 2], "pulse modes accepted: 0 single, 1 doublet, 2 triplet", to_si=tuple),
    Key("limit_policy", "string", "reject", "a command beyond a limit is rejected, or clamped to it",
        choices=("reject", "clamp")),
    Key("threshold_charge_uc", "number", 5.0, "charge per pulse where recruitment starts", lo=0.0, hi=100.0,
        field="threshold_charge_c", to_si=from_micro),
    Key("saturation_charge_uc", "number", 24.0, "charge per pulse of full recruitment (above the threshold)",
        lo=0.0, hi=100.0, field="saturation_charge_c", to_si=from_micro),
    Key("min_frequency_hz", "number", 0.0, "lowest pulse frequency accepted", lo=0.0, hi=1000.0),
    Key("max_frequency_hz", "number", 100.0, "highest pulse frequency accepted (>= min_frequency_hz)",
        lo=0.0, hi=1000.0),
    Key("max_pulse_width_us", "number", 500.0, "longest pulse width accepted", lo=0.0, hi=HW_MAX_PULSE_WIDTH_US),
    Key("max_amplitude_ma", "number", 100.0, "largest current accepted", lo=0.0, hi=HW_MAX_AMPLITUDE_MA),
    Key("frequency_constant_hz", "number", 12.0, "frequency constant f_c of the force-frequency relation",
        lo=0.1, hi=1000.0),
    Key("fusion_frequency_hz", "number", 50.0, "fusion frequency of the force-frequency relation", lo=1.0,
        hi=1000.0),
    Key("doublet_gain", "number", 0.5, "extra rate of a doublet pulse", lo=0.0, hi=2.0),
    Key("emd_ms", "number", 0.0, "electromechanical delay: stimulation -> excitation", lo=0.0, hi=MAX_EMD_MS,
        field="emd_s", to_si=from_milli),
    Key("spill", "value", {}, "spill-over: neighbouring muscle element or group -> gain in [0, 1], recruited "
        "from spill_threshold_charge_uc on, e.g. {brachiorad = 0.3}", to_si=dict),
    Key("spill_threshold_charge_uc", "number", Derived("the channel's `saturation_charge_uc`",
                                                       lambda read: read.get("saturation_charge_uc")),
        "charge per pulse where the spill-over starts (>= threshold_charge_uc)", lo=0.0, hi=100.0,
        field="spill_threshold_charge_c", to_si=from_micro),
), array=True)


@dataclass(frozen=True)
class ChannelConfig:
    name: str
    gains: dict[str, float]                 # muscle element or group -> gain in [0, 1]
    max_pulse_width_us: float = CHANNEL_SCHEMA.default("max_pulse_width_us")
    max_amplitude_ma: float = CHANNEL_SCHEMA.default("max_amplitude_ma")
    min_frequency_hz: float = CHANNEL_SCHEMA.default("min_frequency_hz")
    max_frequency_hz: float = CHANNEL_SCHEMA.default("max_frequency_hz")
    modes: tuple[int, ...] = CHANNEL_SCHEMA.default("modes")
    limit_policy: str = CHANNEL_SCHEMA.default("limit_policy")
    threshold_charge_c: float = CHANNEL_SCHEMA.default("threshold_charge_c")
    saturation_charge_c: float = CHANNEL_SCHEMA.default("saturation_charge_c")
    frequency_constant_hz: float = CHANNEL_SCHEMA.default("frequency_constant_hz")
    fusion_frequency_hz: float = CHANNEL_SCHEMA.default("fusion_frequency_hz")
    doublet_gain: float = CHANNEL_SCHEMA.default("doublet_gain")
    emd_s: float = CHANNEL_SCHEMA.default("emd_s")
    spill: dict[str, float] = field(default_factory=dict)   # neighbouring element or group -> gain in [0, 1]
    spill_threshold_charge_c: float | None = None             # None: the saturation charge

    @property
    def spill_charge_c(self) -> float:
        """Q_spill: where the spill-over starts (module docstring)."""
        return self.saturation_charge_c if self.spill_threshold_charge_c is None else self.spill_threshold_charge_c


@dataclass(frozen=True)
class StimulationConfig:
    mode: str = STIMULATION_SCHEMA.default("mode")
    channels: tuple[ChannelConfig, ...] = field(default_factory=tuple)
    fatigue: str = STIMULATION_SCHEMA.default("fatigue")
    fatigue_rate_scale: float = STIMULATION_SCHEMA.default("fatigue_rate_scale")
    session_seed: int = STIMULATION_SCHEMA.default("session_seed")
    session_cv: float = STIMULATION_SCHEMA.default("session_cv")

    def threshold_factors(self) -> np.ndarray:
        """F_c of every channel (module docstring): deterministic for (seed, channel index); ones without a draw."""
        factors = np.ones(len(self.channels))
        if self.session_cv > 0.0:
            sigma = math.sqrt(math.log1p(self.session_cv ** 2))
            for c in range(len(self.channels)):
                factors[c] = math.exp(sigma * np.random.default_rng((self.session_seed, c)).standard_normal())
        return factors

    def session_channels(self) -> tuple[ChannelConfig, ...]:
        """The channels of this session: every charge times its F_c (the channels themselves without a draw)."""
        if self.session_cv == 0.0:
            return self.channels
        return tuple(replace(ch, threshold_charge_c=ch.threshold_charge_c * f,
                             saturation_charge_c=ch.saturation_charge_c * f,
                             spill_threshold_charge_c=None if ch.spill_threshold_charge_c is None
                             else ch.spill_threshold_charge_c * f)
                     for ch, f in zip(self.channels, self.threshold_factors()))

    def session_header(self) -> dict | None:
        """The draw as a recording header records it (None without a draw): seed, CV and each channel's F_c."""
        if self.session_cv == 0.0:
            return None
        return {"seed": self.session_seed, "threshold_cv": self.session_cv,
                "threshold_factors": {ch.name: float(f) for ch, f in zip(self.channels, self.threshold_factors())}}


def expand_gains(gains: dict[str, float], muscle_names, where: str, file=None) -> np.ndarray:
    """Gain per muscle element from a mapping of elements or groups (:mod:`sim.das3.muscle_groups`) to gains."""
    row = np.zeros(len(muscle_names))
    for key, gain in gains.items():
        if isinstance(gain, bool) or not isinstance(gain, (int, float)) or not (0.0 <= gain <= 1.0):
            raise ConfigError(f"gain must be a number in [0, 1], not {gain!r}", file=file, key=f"{where}.{key}")
        idx = element_indices(key, muscle_names)
        if idx is None:
            raise ConfigError(unknown_muscle(key, muscle_names), file=file, key=f"{where}.{key}")
        row[idx] = np.maximum(row[idx], gain)
    return row


def spill_arrays(channels, muscle_names, file=None) -> tuple[np.ndarray, np.ndarray]:
    """(spill gains S (n_channels, n_muscles), onsets d_c = (Q_spill - Q_th) / (Q_sat - Q_th), inf for a channel
    without spill-over) of ``channels``; no rows when no channel spills (the tick then runs no spill code)."""
    n = len(muscle_names)
    if not any(ch.spill for ch in channels):
        return np.zeros((0, n)), np.zeros(0)
    gains, onset = np.zeros((len(channels), n)), np.full(len(channels), math.inf)
    for c, ch in enumerate(channels):
        if ch.spill:
            gains[c] = expand_gains(ch.spill, muscle_names, f"stimulation.channel[{c}].spill", file)
            onset[c] = (ch.spill_charge_c - ch.threshold_charge_c) / (ch.saturation_charge_c - ch.threshold_charge_c)
    return gains, onset


PW_SCALE, AMP_SCALE = 1e-6, 1e-3
"""s per µs and A per mA: the loop's channel rows are in µs and mA, the map's equations in s and A."""


@kernel
def charge_fraction(applied, c, pw_scale, amp_scale, q_th, q_sat):
    """x_c (module docstring, not clipped) from channel c's row of ``applied`` (pw * pw_scale in s, amp *
    amp_scale in A)."""
    return (applied[c, 0] * pw_scale * applied[c, 1] * amp_scale - q_th[c]) / (q_sat[c] - q_th[c])


@kernel
def recruitment(applied, c, pw_scale, amp_scale, q_th, q_sat):
    """r_c (module docstring) from channel c's row of ``applied`` (pw * pw_scale in s, amp * amp_scale in A)."""
    return recruit(charge_fraction(applied, c, pw_scale, amp_scale, q_th, q_sat))


@kernel
def pulse_rate(applied, c, g_d):
    """f_eff of channel c: its frequency with doublets and triplets counted as a higher rate."""
    return max(0.0, applied[c, 2] * (1.0 + g_d[c] * applied[c, 3]))


@kernel
def force_frequency(rate_hz, c, f_c, fuse_norm):
    """phi_c (module docstring) at pulse rate ``rate_hz``."""
    return min(1.0, -np.expm1(-rate_hz / f_c[c]) / fuse_norm[c])


@kernel
def channel_level(applied, c, pw_scale, amp_scale, q_th, q_sat, f_c, fuse_norm, g_d):
    """r_c phi_c of channel c (module docstring) from its row of ``applied`` (pulse width, amplitude,
    frequency, mode; pw * pw_scale in s, amp * amp_scale in A)."""
    return (recruitment(applied, c, pw_scale, amp_scale, q_th, q_sat)
            * force_frequency(pulse_rate(applied, c, g_d), c, f_c, fuse_norm))


@njit(cache=True, nogil=True)
def excitation_kernel(applied, pw_scale, amp_scale, q_th, q_sat, f_c, fuse_norm, g_d, gains, spill_onset,
                      spill_gains, out):
    """The module docstring's equations for every channel (rows of ``applied``: pulse width, amplitude,
    frequency, mode; pw * pw_scale in s, amp * amp_scale in A) and muscle element, into ``out``."""
    out[:] = 0.0
    for c in range(gains.shape[0]):
        raise_to_level(gains, c, channel_level(applied, c, pw_scale, amp_scale, q_th, q_sat, f_c, fuse_norm, g_d),
                       out)
        if spill_gains.shape[0]:
            x = charge_fraction(applied, c, pw_scale, amp_scale, q_th, q_sat)
            raise_to_level(spill_gains, c, recruit(x - spill_onset[c]) * force_frequency(
                pulse_rate(applied, c, g_d), c, f_c, fuse_norm), out)
    clip_unit(out)
    return out


@kernel
def delayed_excitation(applied, pw_scale, amp_scale, stim, emd, fatigue, out):
    """:func:`excitation_kernel` with each channel's level delayed by its electromechanical delay and
    scaled by its fitness. ``emd`` = (ring (n_channels, depth), delay in ticks per channel, cursor (1,)):
    this tick's level is written at the cursor and the level of ``delay`` ticks ago drives the muscles.
    ``fatigue`` = (state, parameters, fitness, tick length (1,)) of :mod:`hil.rt.fatigue`, or a state with
    no rows (no fatigue): the fitness at the start of the tick scales the level, then the state advances
    under this tick's stimulation. With spill-over the ring has a second block of n_channels rows, the
    spill levels, delayed and scaled alike. Call once per tick."""
    q_th, q_sat, f_c, fuse_norm, g_d, gains, spill_onset, spill_gains = stim
    ring, delay, cursor = emd
    state, params, fitness, dt = fatigue
    depth = ring.shape[1]
    n_ch = gains.shape[0]
    spill = ring.shape[0] > n_ch
    now = cursor[0]
    out[:] = 0.0
    for c in range(n_ch):
        x = charge_fraction(applied, c, pw_scale, amp_scale, q_th, q_sat)
        r = recruit(x)
        rate = pulse_rate(applied, c, g_d)
        phi = force_frequency(rate, c, f_c, fuse_norm)
        ring[c, now] = r * phi
        level = ring[c, (now - delay[c]) % depth]
        spill_level = 0.0
        if spill:
            ring[n_ch + c, now] = recruit(x - spill_onset[c]) * phi
            spill_level = ring[n_ch + c, (now - delay[c]) % depth]
        if state.shape[0]:
            fitness[c] = channel_fitness(state, c, params)
            level *= fitness[c]
            spill_level *= fitness[c]
            fatigue_tick(state, params, c, r, rate, dt[0])
        raise_to_level(gains, c, level, out)
        if spill:
            raise_to_level(spill_gains, c, spill_level, out)
    clip_unit(out)
    cursor[0] = (now + 1) % depth


def no_stimulation_params(n_muscles: int) -> tuple:
    """:attr:`StimulationModel.kernel_params` of a map with no channels (direct excitation mode)."""
    empty = np.zeros(0)
    return empty, empty, empty, empty, empty, np.zeros((0, n_muscles)), empty, np.zeros((0, n_muscles))


def no_delay_line() -> tuple:
    """:meth:`StimulationModel.delay_line` of a map with no channels."""
    return np.zeros((0, 1)), np.zeros(0, np.int64), np.zeros(1, np.int64)


def no_fatigue(n_channels: int = 0) -> tuple:
    """:meth:`StimulationModel.fatigue_state` without fatigue: no state rows, fitness 1."""
    return np.zeros((0, len(STATE_COLUMNS))), DING2003.kernel_array(), np.ones(n_channels), np.zeros(1)


class StimulationModel:
    """Stimulation -> excitation map of a set of channels (a compiled, allocation-free hot path)."""

    def __init__(self, config: StimulationConfig, muscle_names, file=None) -> None:
        self.config = config
        self.channels = config.channels
        self.n_channels = len(config.channels)
        n = len(muscle_names)
        self.gains = np.zeros((self.n_channels, n))
        for c, ch in enumerate(config.channels):
            self.gains[c] = expand_gains(ch.gains, muscle_names, f"stimulation.channel[{c}].muscles", file)
        self.threshold_factors = config.threshold_factors()
        self.channels = config.session_channels()            # this session's charges
        self.spill_gains, self.spill_onset = spill_arrays(self.channels, muscle_names, file)
        p = lambda attr: np.array([getattr(ch, attr) for ch in self.channels], float)  # noqa: E731
        self.q_th, self.q_sat = p("threshold_charge_c"), p("saturation_charge_c")
        self.f_c, self.f_fuse, self.g_d = p("frequency_constant_hz"), p("fusion_frequency_hz"), p("doublet_gain")
        self._fuse_norm = -np.expm1(-self.f_fuse / self.f_c)
        self._si = np.zeros((self.n_channels, 4))

    def excitation(self, pw_s, amp_a, freq_hz, mode, out) -> np.ndarray:
        """u (138,) into ``out`` from per-channel arrays in SI units (s, A, Hz, mode)."""
        si = self._si
        si[:, 0], si[:, 1], si[:, 2], si[:, 3] = pw_s, amp_a, freq_hz, mode
        return self.excitation_from_applied(si, out, 1.0, 1.0)

    def excitation_from_applied(self, applied, out, pw_scale: float = PW_SCALE, amp_scale: float = AMP_SCALE
                                ) -> np.ndarray:
        """u into ``out`` from the loop's (n_channels, 4) array: pulse width µs, amplitude mA, frequency
        Hz, mode (one compiled kernel: no allocation, no per-channel Python)."""
        return excitation_kernel(applied, pw_scale, amp_scale, *self.kernel_params, out)

    def fatigue_state(self, period_s: float) -> tuple:
        """(state, parameters, fitness, tick length) for :func:`delayed_excitation`: every channel rested
        with the configured fatigue model, or :func:`no_fatigue`."""
        if self.config.fatigue == "none":
            return no_fatigue(self.n_channels)
        return (rested_state(self.n_channels), DING2003.kernel_array(self.config.fatigue_rate_scale),
                np.ones(self.n_channels), np.array([period_s]))

    def delay_line(self, period_s: float) -> tuple:
        """(ring, delay ticks per channel, cursor) for :func:`delayed_excitation`: each channel's
        electromechanical delay rounded to whole loop periods."""
        delay = np.array([round(ch.emd_s / period_s) for ch in self.channels], np.int64)
        depth = int(delay.max(initial=0)) + 1
        rows = self.n_channels * (2 if self.spill_gains.shape[0] else 1)   # the spill levels' block
        return np.zeros((rows, depth)), delay, np.zeros(1, np.int64)

    @property
    def kernel_params(self) -> tuple:
        """(q_th, q_sat, f_c, fusion normaliser, g_d, gains, spill onsets d_c, spill gains): the map's
        parameters as :func:`excitation_kernel` takes them after the scales (no spill rows without spill-over)."""
        return (self.q_th, self.q_sat, self.f_c, self._fuse_norm, self.g_d, self.gains, self.spill_onset,
                self.spill_gains)

    def check_command(self, channel: int, pw_us: float, amp_ma: float, freq_hz: float, mode: int):
        """((pw, amp, freq, mode), reason): reason None if within limits; with policy 'reject' an
        out-of-limit command returns (None, reason), with 'clamp' the clamped values and the reason."""
        ch = self.channels[channel]
        if not (math.isfinite(pw_us) and math.isfinite(amp_ma) and math.isfinite(freq_hz) and math.isfinite(mode)):
            return None, "non_finite"
        reason = None
        if mode not in ch.modes:
            return None, "mode_not_allowed"  # no sensible clamp for a pulse pattern
        if not 0.0 <= pw_us <= ch.max_pulse_width_us:
            reason = "pulse_width_limit"
        elif not 0.0 <= amp_ma <= ch.max_amplitude_ma:
            reason = "amplitude_limit"
        elif not ch.min_frequency_hz <= freq_hz <= ch.max_frequency_hz and not (freq_hz == 0.0):
            reason = "frequency_limit"
        if reason is None:
            return (pw_us, amp_ma, freq_hz, mode), None
        if ch.limit_policy == "reject":
            return None, reason
        return (min(max(pw_us, 0.0), ch.max_pulse_width_us), min(max(amp_ma, 0.0), ch.max_amplitude_ma),
                min(max(freq_hz, ch.min_frequency_hz), ch.max_frequency_hz), mode), reason


def common_pulse_limits(channels) -> tuple[float, float, float]:
    """(longest pulse width us, lowest and highest frequency Hz) that every one of ``channels`` accepts: the range
    in which one fixed pulse can drive them all."""
    return (min(ch.max_pulse_width_us for ch in channels), max(ch.min_frequency_hz for ch in channels),
            min(ch.max_frequency_hz for ch in channels))


def fatigue_channel_names(table) -> list[str]:
    """The channel names of a ``[stimulation]`` table with a fatigue model (the labels of
    ``hil_fatigue_fitness``), else none; also read before the table is validated, so defensive."""
    table = table if isinstance(table, dict) else {}
    channels = table.get("channel", [])
    if table.get("fatigue", "none") == "none" or table.get("mode", "channels") != "channels" \
            or not isinstance(channels, list):
        return []
    return [str(ch.get("name", default_channel_name(i))) if isinstance(ch, dict) else default_channel_name(i)
            for i, ch in enumerate(channels)]


def load_stimulation_config(table: dict, muscle_names, file=None) -> StimulationConfig:
    """Parse the ``[stimulation]`` table (``mode``, ``[[stimulation.channel]]``) with precise errors."""
    top = ConfigTable(table, "stimulation", file)
    values = top.read(STIMULATION_SCHEMA)
    top.done()
    raw = values.pop("channels")
    if not isinstance(raw, list) or len(raw) > MAX_CHANNELS:
        raise top.error("channel", f"must be an array of at most {MAX_CHANNELS} tables")
    if values["mode"] == "channels" and not raw:
        raise top.error("channel", "channel mode needs at least one [[stimulation.channel]]")
    names: set[str] = set()
    channels = tuple(_channel_config(ConfigTable(v, f"stimulation.channel[{i}]", file), i, names, muscle_names)
                     for i, v in enumerate(raw))
    return StimulationConfig(channels=channels, **values)


def _channel_config(ch: ConfigTable, index: int, names: set[str], muscle_names) -> ChannelConfig:
    """One ``[[stimulation.channel]]``: its keys in schema order, each checked against the ones before it."""
    read: dict = {}
    for key in CHANNEL_SCHEMA.keys:
        read[key.name] = ch.key(key, read, default_channel_name(index) if key.name == "name" else None)
        reason = _channel_key_problem(key.name, read, names, muscle_names, ch)
        if reason is not None:
            raise ch.error(*reason)
    ch.done()
    names.add(read["name"])
    if "spill_threshold_charge_uc" not in ch.values:       # follows the (session's) saturation charge
        read["spill_threshold_charge_uc"] = None
    return ChannelConfig(**{key.field: key.si(read[key.name]) for key in CHANNEL_SCHEMA.keys})


def _channel_key_problem(name: str, read: dict, names: set[str], muscle_names, ch: ConfigTable):
    """(key, reason) when the channel key just read is inconsistent (with the keys before it), else None."""
    if name == "name" and read["name"] in names:
        return "name", f"duplicate channel name {read['name']!r}"
    if name == "muscles":
        muscles = read["muscles"]
        if not isinstance(muscles, dict) or not muscles:
            return "muscles", "must be a table of muscle element or group -> gain"
        expand_gains(muscles, muscle_names, f"{ch.name}.muscles", ch.file)  # validates names and gains
    if name == "spill":
        return _spill_problem(read, muscle_names, ch)
    modes = read.get("modes")
    if name == "modes" and (not isinstance(modes, list) or not modes
                            or not all(m in (0, 1, 2) and not isinstance(m, bool) for m in modes)):
        return "modes", "must be a non-empty list of 0 (single), 1 (doublet), 2 (triplet)"
    if name == "saturation_charge_uc" and not from_micro(read["threshold_charge_uc"]) < from_micro(read[name]):
        return "threshold_charge_uc", "threshold_charge_uc must be below saturation_charge_uc"
    if name == "max_frequency_hz" and read["min_frequency_hz"] > read[name]:
        return "min_frequency_hz", "min_frequency_hz must not exceed max_frequency_hz"
    if name == "spill_threshold_charge_uc" and read[name] < read["threshold_charge_uc"]:
        return name, "must not be below threshold_charge_uc (the spill-over starts at a higher charge)"
    return None


def _spill_problem(read: dict, muscle_names, ch: ConfigTable):
    """(key, reason) when ``spill`` is not a table of neighbours -> gains, or names a muscle the channel drives."""
    spill = read["spill"]
    if not isinstance(spill, dict):
        return "spill", "must be a table of neighbouring muscle element or group -> gain"
    own = expand_gains(read["muscles"], muscle_names, f"{ch.name}.muscles", ch.file) > 0.0
    for key in spill:
        row = expand_gains({key: spill[key]}, muscle_names, f"{ch.name}.spill", ch.file)
        if np.any(own & (row > 0.0)):
            return f"spill.{key}", "the channel drives it already (muscles); spill names its neighbours"
    return None


def channel_phi(channel: ChannelConfig, frequency_hz: float, mode: int = 0) -> float:
    """phi of ``channel`` (module docstring) at ``frequency_hz`` in pulse mode ``mode`` (:func:`force_frequency`
    outside a kernel)."""
    f_eff = frequency_hz * (1.0 + channel.doublet_gain * mode)
    return min(1.0, -math.expm1(-f_eff / channel.frequency_constant_hz)
               / -math.expm1(-channel.fusion_frequency_hz / channel.frequency_constant_hz))


def amplitude_for_level(channel: ChannelConfig, level: float, pulse_width_s: float, frequency_hz: float,
                        mode: int = 0) -> float | None:
    """The amplitude (A) at which ``channel`` drives its muscles at ``level`` = r phi (module
    docstring) for the given pulse width, frequency and mode: r = level / phi, x from r = 3x^2 - 2x^3,
    Q = Q_th + x (Q_sat - Q_th), I = Q / PW. None when the level needs r > 1 at that frequency."""
    phi = channel_phi(channel, frequency_hz, mode)
    if level <= 0.0:
        return 0.0
    r = level / phi
    if r > 1.0 + 1e-12:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if mid * mid * (3.0 - 2.0 * mid) < r else (lo, mid)
    x = 0.5 * (lo + hi)
    charge = channel.threshold_charge_c + x * (channel.saturation_charge_c - channel.threshold_charge_c)
    return charge / pulse_width_s
