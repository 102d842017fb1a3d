"""The checks of what a caller gives the environments: constructor arguments, reset options and actions. Each
refuses a bad value with one :class:`ArgumentError` line (a ``ValueError``) naming the argument, what it takes and
what it got, before anything is built or stepped (a batch of arms is never half reset or half stepped by a bad
value); the command line shows it as one line (a :class:`sim.errors.UserInputError`).

The bounds are *proposals* of this project, set where a larger value is a mistake rather than an experiment.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping

import numpy as np

from sim.errors import UserInputError


class ArgumentError(UserInputError, ValueError):
    """A bad argument, reset option or action of an environment."""


MAX_ENVS = 1024
"""Most arms in one batch: a DAS3 arm's engine holds about 0.9 MB (``ru_maxrss`` over 64 arms, 2026-11-29), so
1024 arms are about 1 GB; more arms belong in more processes (Stable-Baselines3's ``SubprocVecEnv`` of batches)."""
MAX_DURATION_S = 3600.0
"""Longest episode: an hour of simulated time (fatigue protocols run for minutes)."""
MAX_ACTION_PERIOD_S = 10.0
"""Longest action period: 2500 ticks of 4 ms per step (controllers of FES act every 10-100 ms)."""
MAX_HAND_LOAD_KG = 20.0
"""Heaviest hand load, drawn or given (well beyond what an FES-driven arm lifts)."""


def whole_number(name: str, value, low: int, high: int) -> int:
    """``value`` as an int in [low, high] (a bool is no number here)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise ArgumentError(f"{name}: a whole number from {low} to {high}, not {value!r}")
    return int(value)


def seconds(name: str, value, high: float) -> float:
    """``value`` as a finite number of seconds in (0, high]."""
    if not _number(value) or not 0.0 < value <= high:             # false for NaN
        raise ArgumentError(f"{name}: seconds, more than 0 and at most {high:g}, not {value!r}")
    return float(value)


def hand_load(value) -> float:
    """A hand load in kg, finite, in [0, MAX_HAND_LOAD_KG]."""
    if not _number(value) or not 0.0 <= value <= MAX_HAND_LOAD_KG:
        raise ArgumentError(f"hand_load_kg: kg from 0 to {MAX_HAND_LOAD_KG:g}, not {value!r}")
    return float(value)


def hand_load_range(value) -> tuple[float, float]:
    """(low, high) hand loads in kg with 0 <= low <= high <= MAX_HAND_LOAD_KG."""
    pair = tuple(value) if isinstance(value, (tuple, list, np.ndarray)) else ()
    if len(pair) != 2 or not all(_number(v) for v in pair) or not 0.0 <= pair[0] <= pair[1] <= MAX_HAND_LOAD_KG:
        raise ArgumentError(f"hand_load_kg: (low, high) with 0 <= low <= high <= {MAX_HAND_LOAD_KG:g} kg, not {value!r}")
    return float(pair[0]), float(pair[1])


def task_name(value, tasks: Mapping) -> str:
    """The name of a registered task."""
    if not isinstance(value, str) or value not in tasks:
        raise ArgumentError(f"unknown task {value!r} (one of {', '.join(tasks)})")
    return value


def observed_items(value) -> tuple[str, ...]:
    """The frame items to observe: a sequence of names (``"q"``, ``"q[ELx]"``; checked by the layout)."""
    items = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, (tuple, list)) else None
    if not items or not all(isinstance(item, str) for item in items):
        raise ArgumentError(f"observe: frame item names such as ('q[ELx]', 'qdot[ELx]'), not {value!r}")
    return items


def render_mode(value) -> str | None:
    """None (nothing drawn) or ``"rgb_array"`` (:mod:`hil.gym.render`)."""
    if value not in (None, "rgb_array"):
        raise ArgumentError(f"render_mode: None or 'rgb_array', not {value!r}")
    return value


def modelled_items(items: tuple[str, ...], unmodelled_fields: tuple[str, ...], asked: bool) -> tuple[str, ...]:
    """The frame items of ``items`` the plant models. A task's own items of ``unmodelled_fields`` (NaN in every
    frame) are left out, so its observation holds only numbers (ForwardFlexion on the MTG arm observes no GH
    stability); ``asked`` for by the caller, they are refused."""
    left_out = tuple(item for item in items if item.partition("[")[0] in unmodelled_fields)
    if left_out and asked:
        raise ArgumentError(f"observe: {', '.join(left_out)}: not modelled by this plant (NaN in every frame)")
    return tuple(item for item in items if item not in left_out)


def reward_weights(weights, kind: type):
    """Reward weights of type ``kind``, finite, with an error scale above zero."""
    values = vars(weights).values() if isinstance(weights, kind) else ()
    if not values or not all(math.isfinite(v) for v in values) or not weights.error_scale > 0.0:
        raise ArgumentError(f"weights: a {kind.__name__} of finite numbers with error_scale > 0, not {weights!r}")
    return weights


def fixed_pulse(kind: str, limits: tuple[float, float, float], pulse_width_us, frequency_hz) -> None:
    """The pulse width and frequency that actions of kind "level" or "amplitude_ma" hold fixed: within the action
    channels' common ``limits`` (:func:`hil.rt.stimulation.common_pulse_limits`: pulse width in (0, max], frequency
    in [min, max]), or every command would be rejected."""
    if kind == "pw_amp_freq":
        return
    top, lowest, highest = limits
    if not _number(pulse_width_us) or not 0.0 < pulse_width_us <= top:
        raise ArgumentError(f"pulse_width_us: more than 0 and at most {top:g} (the channels' limit), not {pulse_width_us!r}")
    if not _number(frequency_hz) or not lowest <= frequency_hz <= highest:
        raise ArgumentError(f"frequency_hz: from {lowest:g} to {highest:g} Hz (the channels' limits), not {frequency_hz!r}")


def _number(value) -> bool:
    """A real number (a bool is none here)."""
    return isinstance(value, (int, float, np.floating, np.integer)) and not isinstance(value, bool)


def vector_seeds(seed, n: int) -> list:
    """Each of ``n`` arms' seed for a vector reset: ``seed`` None (each arm's generator goes on), a whole number
    s >= 0 (arm i gets s + i, as Gymnasium's vector environments do) or a list of ``n`` seeds, each a whole number
    >= 0 or None. Checked whole before any arm is reset."""
    if seed is None:
        return [None] * n
    if _seed(seed):
        return [int(seed) + i for i in range(n)]
    if not isinstance(seed, (list, tuple, np.ndarray)) or len(seed) != n:
        got = f"{len(seed)} seeds" if isinstance(seed, (list, tuple, np.ndarray)) else repr(seed)[:80]
        raise ArgumentError(f"seed: a whole number >= 0, or a list of {n} (one per environment), not {got}")
    for i, s in enumerate(seed):
        if s is not None and not _seed(s):
            raise ArgumentError(f"seed[{i}]: a whole number >= 0 or None, not {repr(s)[:80]}")
    return [None if s is None else int(s) for s in seed]


def _seed(value) -> bool:
    """A seed numpy's generators take: a whole number >= 0 (a bool is none here)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and value >= 0


def reset_options(options) -> dict:
    """A copy of the reset options (None: none)."""
    if options is None:
        return {}
    if not isinstance(options, Mapping):
        raise ArgumentError(f"reset options: a dict, not {type(options).__name__}")
    return dict(options)


def patient_name(value) -> str | None:
    """A patient preset's name or a patient file's path (None: able-bodied)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise ArgumentError(f"patient: a preset name or a patient file, not {type(value).__name__}")


def target_parameters(value, limits: tuple[tuple[float, float], ...], unit: str) -> np.ndarray:
    """The task's target parameters: one finite number per parameter, each within its ``limits``."""
    try:
        params = np.asarray(value, np.float64).reshape(-1)
    except (TypeError, ValueError):
        params = np.zeros(0)
    if params.shape[0] != len(limits) or not all(lo <= v <= hi for v, (lo, hi) in zip(params.tolist(), limits)):
        bounds = ", ".join(f"[{lo:g}, {hi:g}]" for lo, hi in limits)
        raise ArgumentError(f"target: {len(limits)} number(s) ({unit}) within {bounds}, not {value!r}")
    return params


def degrees(value, limits: tuple[float, float]) -> float:
    """An angle given in degrees, in radians, within ``limits`` (rad)."""
    lo, hi = (math.degrees(v) for v in limits)
    if not _number(value) or not lo <= value <= hi:
        raise ArgumentError(f"target_deg: an angle in degrees within [{lo:g}, {hi:g}], not {value!r}")
    return math.radians(float(value))


def action_array(actions, shape: tuple[int, ...]) -> np.ndarray:
    """``actions`` as float64 numbers of ``shape`` (non-finite values pass: the engine rejects and counts them)."""
    try:
        array = np.asarray(actions, np.float64)
    except (TypeError, ValueError):
        array = None
    if array is None or array.shape != shape:
        got = "non-numbers" if array is None else f"shape {array.shape}"
        raise ArgumentError(f"action: numbers of shape {shape}, not {got}")
    return array
