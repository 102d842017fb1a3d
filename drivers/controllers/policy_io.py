"""What a learned policy sees and commands: the layout of its observation vector (sensor-frame fields and the
task's target) and of its action vector (stimulation channels). One definition serves both sides of a policy's
life, so they cannot drift apart: the Gymnasium environments that train it (:mod:`hil.gym`) and the controller
plug-in that runs it in ``hil run`` (:mod:`drivers.controllers.policy`).

Observation items name frame fields (:func:`drivers.core.contract.frame_dtype` and the lab sensors' fields):
``q`` (every DOF), ``q[ELx]`` (one DOF by name), ``th_angles[elevation]``, ``hand_position[y]``, ``gh_stability``,
``imu_gyro`` ... in SI units and radians, as the frame carries them. The task's target (rad or m) follows them.

Actions per channel (``kind``): ``level`` in [0, 1], the amplitude as a fraction of the channel's limit at a fixed
pulse width and frequency; ``amplitude_ma`` at a fixed pulse width and frequency; ``pw_amp_freq``: pulse width (us),
amplitude (mA) and frequency (Hz) each. Commands leave here unclipped: the tick engine applies the channel's limits
and limit policy (clamp or reject) exactly as for any controller.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

COMPONENT_NAMES = {"th_angles": ("plane", "elevation", "rotation"), "hand_position": ("x", "y", "z"),
                   "gh_force": ("x", "y", "z")}
"""Names of the components of the frame's 3-vectors (the thoracohumeral angles in the frame's order)."""
ACTION_KINDS = ("level", "amplitude_ma", "pw_amp_freq")


class LayoutError(ValueError):
    """An observation item or action layout that the run's frame or channels cannot give."""


@dataclass(frozen=True)
class ObservedItem:
    """One observation item: frame field ``field``, its flat element ``index`` (None: the whole field)."""

    label: str
    field: str
    index: int | None
    size: int


def observed_item(label: str, frame_dtype: np.dtype, dof_names) -> ObservedItem:
    """Parse ``label`` (``field`` or ``field[component]``) against the frame layout."""
    field, _, rest = label.partition("[")
    if field not in (frame_dtype.names or ()) or field in ("tick", "status", "lab_pad"):
        raise LayoutError(f"observation item {label!r}: the frame has no field {field!r}")
    shape = frame_dtype[field].shape
    size = int(np.prod(shape)) if shape else 1
    if not rest:
        return ObservedItem(label, field, None, size)
    component = rest.rstrip("]")
    names = tuple(dof_names) if field in ("q", "qdot") else COMPONENT_NAMES.get(field, ())
    if component in names:
        return ObservedItem(label, field, names.index(component), 1)
    if component.isdigit() and int(component) < size:
        return ObservedItem(label, field, int(component), 1)
    raise LayoutError(f"observation item {label!r}: {field} has no component {component!r}"
                      + (f" (one of {', '.join(names)})" if names else ""))


class ObservationLayout:
    """The observation vector: the items' values from a frame, then the target's ``n_target`` values."""

    def __init__(self, items, frame_dtype: np.dtype, dof_names, n_target: int) -> None:
        self.items = tuple(observed_item(label, frame_dtype, dof_names) for label in items)
        self.n_target = n_target
        self.size = sum(i.size for i in self.items) + n_target
        self.labels = tuple(self._labels(dof_names)) + tuple(f"target[{k}]" for k in range(n_target))

    def _labels(self, dof_names):
        for item in self.items:
            if item.index is not None or item.size == 1:
                yield item.label
            else:
                names = tuple(dof_names) if item.field in ("q", "qdot") else COMPONENT_NAMES.get(item.field, ())
                yield from (f"{item.field}[{names[k] if k < len(names) else k}]" for k in range(item.size))

    def fill(self, frames: np.ndarray, targets: np.ndarray, out: np.ndarray) -> None:
        """``out[i]`` = the observation of ``frames[i]`` (a record array of N frames) and ``targets[i]``."""
        start = 0
        for item in self.items:
            values = frames[item.field].reshape(frames.shape[0], -1)
            if item.index is None:
                out[:, start:start + item.size] = values
            else:
                out[:, start] = values[:, item.index]
            start += item.size
        out[:, start:] = targets


@dataclass(frozen=True)
class ActionLayout:
    """The action vector: ``kind`` values for each of ``channels`` (0-based), with ``pulse_width_us`` and
    ``frequency_hz`` fixed for the kinds that do not command them and each channel's ``max_amplitude_ma``,
    ``max_pulse_width_us``, ``min_frequency_hz``, ``max_frequency_hz`` (its configured limits) as the bounds."""

    channels: tuple[int, ...]
    kind: str
    pulse_width_us: float
    frequency_hz: float
    max_amplitude_ma: tuple[float, ...]
    max_pulse_width_us: tuple[float, ...]
    min_frequency_hz: tuple[float, ...]
    max_frequency_hz: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.kind not in ACTION_KINDS:
            raise LayoutError(f"action kind {self.kind!r}: one of {', '.join(ACTION_KINDS)}")

    @property
    def per_channel(self) -> int:
        return 3 if self.kind == "pw_amp_freq" else 1

    @property
    def size(self) -> int:
        return self.per_channel * len(self.channels)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) of the action vector: the channels' configured limits."""
        n = len(self.channels)
        if self.kind == "level":
            return np.zeros(n), np.ones(n)
        if self.kind == "amplitude_ma":
            return np.zeros(n), np.array(self.max_amplitude_ma)
        low = np.column_stack([np.zeros(n), np.zeros(n), self.min_frequency_hz]).reshape(-1)
        high = np.column_stack([self.max_pulse_width_us, self.max_amplitude_ma, self.max_frequency_hz]).reshape(-1)
        return low, high

    def commands(self, action: np.ndarray):
        """(channel, pulse width us, amplitude mA, frequency Hz) of each channel for ``action`` (Python floats;
        one action's :meth:`rows`)."""
        return [(c, pw, amp, freq) for c, (pw, amp, freq, _) in zip(self.channels, self.rows(action[None])[0].tolist())]

    def rows(self, actions: np.ndarray) -> np.ndarray:
        """(N, channels, 4) pulse width us, amplitude mA, frequency Hz, mode 0 of N actions (vectorised
        :meth:`commands`)."""
        n, k = actions.shape[0], len(self.channels)
        out = np.zeros((n, k, 4))
        if self.kind == "pw_amp_freq":
            out[:, :, :3] = actions.reshape(n, k, 3)
            return out
        out[:, :, 0], out[:, :, 2] = self.pulse_width_us, self.frequency_hz
        out[:, :, 1] = actions * np.array(self.max_amplitude_ma) if self.kind == "level" else actions
        return out

    def to_dict(self) -> dict:
        return {"channels": list(self.channels), "kind": self.kind, "pulse_width_us": self.pulse_width_us,
                "frequency_hz": self.frequency_hz, "max_amplitude_ma": list(self.max_amplitude_ma),
                "max_pulse_width_us": list(self.max_pulse_width_us),
                "min_frequency_hz": list(self.min_frequency_hz), "max_frequency_hz": list(self.max_frequency_hz)}


def action_layout(channel_limits, channel_names, names, kind: str, pulse_width_us: float,
                  frequency_hz: float) -> ActionLayout:
    """The layout of the channels called ``names`` among ``channel_names``; ``channel_limits[k]``: channel k's
    (max pulse width us, max amplitude mA, min frequency Hz, max frequency Hz)."""
    missing = [n for n in names if n not in channel_names]
    if missing:
        raise LayoutError(f"no stimulation channel {', '.join(map(repr, missing))} "
                          f"(channels: {', '.join(channel_names) or 'none'})")
    idx = tuple(channel_names.index(n) for n in names)
    lim = [channel_limits[k] for k in idx]
    return ActionLayout(idx, kind, float(pulse_width_us), float(frequency_hz),
                        tuple(x[1] for x in lim), tuple(x[0] for x in lim), tuple(x[2] for x in lim),
                        tuple(x[3] for x in lim))
