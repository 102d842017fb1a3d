"""A trained policy as a controller plug-in: ``controller = "policy"`` with ``policy = "file.npz"`` runs in
``hil run`` the policy an environment of :mod:`hil.gym` trained (saved by :func:`hil.gym.policy_file.save_policy`).

The file holds the policy's deterministic action network as plain arrays (a multilayer perceptron: ``W0, b0, W1,
b1, ...`` with one activation between layers, the last layer linear), the observation normalisation it was
trained with (mean, variance, clip; none: zero mean, unit variance), and the observation and action layouts
(:mod:`drivers.controllers.policy_io`). Each call: observation of the frame and the configured target ->
normalise -> network -> clip to the action's bounds -> channel commands, through the engine's limits as for
any controller. The network runs in numpy: no deep-learning library is needed in the loop.

Keys: ``policy`` (the file, relative to the config) and the task's fixed target: ``target_deg`` for an angle task
(ElbowHold: the elbow flexion; ForwardFlexion: the elevation), ``target_m`` (a list, thorax frame) for Reach;
without it, the middle of the task's target range.
"""
from __future__ import annotations

import json
import math
import os
import zipfile

import numpy as np

from drivers.controllers.plugin import ChannelCommand, Controller, ControllerSettings
from drivers.controllers.policy_io import ActionLayout, LayoutError, ObservationLayout
from drivers.core.config_table import REQUIRED, ConfigTable

ACTIVATIONS = {"tanh": np.tanh, "relu": lambda x: np.maximum(x, 0.0)}
MAX_LAYERS = 16
MAX_WEIGHTS = 10_000_000
"""The largest policy file accepted (layers, weights): a bound on what a corrupt file can make us allocate."""
MAX_UNPACKED_BYTES = 8 * MAX_WEIGHTS + (1 << 20)
"""Most bytes the file's arrays may unpack to (the weights as float64, and a MiB for the rest), checked from the
zip directory before any array is read: a file whose header declares a huge array, or a zip bomb, is refused
instead of filling the memory."""


class PolicyFileError(ValueError):
    """A policy file that cannot be read or does not fit the run."""


class PolicyNetwork:
    """The arrays of a policy file: layers, activation, normalisation, layouts (:func:`read_policy`)."""

    def __init__(self, layers, activation: str, obs_mean, obs_var, obs_clip: float, meta: dict) -> None:
        self.layers, self.activation = layers, ACTIVATIONS[activation]
        self.obs_mean, self.obs_std, self.obs_clip = obs_mean, np.sqrt(obs_var + 1e-8), obs_clip
        self.meta = meta

    def act(self, obs: np.ndarray) -> np.ndarray:
        x = np.clip((obs - self.obs_mean) / self.obs_std, -self.obs_clip, self.obs_clip)
        for k, (w, b) in enumerate(self.layers):
            x = w @ x + b
            if k < len(self.layers) - 1:
                x = self.activation(x)
        return x


def read_policy(path: str) -> PolicyNetwork:
    """The policy in ``path``; PolicyFileError with the reason for anything else."""
    try:
        _check_unpacked_size(path)
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            n_layers = int(meta["n_layers"])
            if not 1 <= n_layers <= MAX_LAYERS:
                raise PolicyFileError(f"{n_layers} layers (1..{MAX_LAYERS})")
            layers = [(np.asarray(data[f"W{k}"], float), np.asarray(data[f"b{k}"], float)) for k in range(n_layers)]
            mean, var = np.asarray(data["obs_mean"], float), np.asarray(data["obs_var"], float)
    except PolicyFileError as exc:
        raise PolicyFileError(f"policy file {path}: {exc}") from None
    except (OSError, ValueError, KeyError, TypeError, zipfile.BadZipFile, json.JSONDecodeError) as exc:
        raise PolicyFileError(f"policy file {path}: not a policy saved by hil.gym ({type(exc).__name__}: {exc})") \
            from None
    check_network(path, layers, mean, var, meta)
    return PolicyNetwork(layers, meta["activation"], mean, var, float(meta.get("obs_clip", math.inf)), meta)


def _check_unpacked_size(path: str) -> None:
    """The sizes the zip directory gives the file's members (what reading them produces, at most) and each array's
    declared shape: within :data:`MAX_UNPACKED_BYTES`."""
    with zipfile.ZipFile(path) as archive:
        total = sum(info.file_size for info in archive.infolist())
        if total > MAX_UNPACKED_BYTES:
            raise PolicyFileError(f"its arrays unpack to {total} bytes; at most {MAX_UNPACKED_BYTES}")
        for info in archive.infolist():
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                read_header = {(1, 0): np.lib.format.read_array_header_1_0,
                               (2, 0): np.lib.format.read_array_header_2_0}.get(version)
                if read_header is None:
                    raise PolicyFileError(f"{info.filename}: .npy format version {version} (1.0 or 2.0)")
                shape, _, dtype = read_header(member)
            if math.prod(shape) * dtype.itemsize > MAX_UNPACKED_BYTES:
                raise PolicyFileError(f"{info.filename} declares an array of shape {shape}; at most "
                                      f"{MAX_UNPACKED_BYTES} bytes")


def check_network(path: str, layers, mean, var, meta: dict) -> None:
    """The layers chain (each input the previous output), fit the observation and action sizes, are finite."""
    def bad(why):
        return PolicyFileError(f"policy file {path}: {why}")
    if sum(w.size + b.size for w, b in layers) > MAX_WEIGHTS:
        raise bad(f"more than {MAX_WEIGHTS} weights")
    if meta.get("activation") not in ACTIVATIONS:
        raise bad(f"activation {meta.get('activation')!r} (one of {', '.join(ACTIVATIONS)})")
    size = mean.shape[0] if mean.ndim == 1 else -1
    if var.shape != mean.shape or not (np.all(np.isfinite(mean)) and np.all(np.isfinite(var)) and np.all(var >= 0)):
        raise bad("observation mean and variance must be finite vectors of one size (variance >= 0)")
    for k, (w, b) in enumerate(layers):
        if w.ndim != 2 or b.shape != (w.shape[0],) or w.shape[1] != size or not np.all(np.isfinite(w)) \
                or not np.all(np.isfinite(b)):
            raise bad(f"layer {k}: W{k} {w.shape} and b{k} {b.shape} do not take {size} finite inputs")
        size = w.shape[0]
    if size != int(meta.get("action_size", -1)):
        raise bad(f"the network gives {size} actions, the action layout takes {meta.get('action_size')}")


class PolicyController(Controller):
    """Runs a saved policy (module docstring)."""

    max_commands = 64

    def reset(self, settings: ControllerSettings) -> None:
        super().reset(settings)
        t = ConfigTable(dict(settings.params), settings.config_key, settings.config_file)
        path = t.string("policy", REQUIRED)
        path = path if os.path.isabs(path) else os.path.join(settings.base_dir, path)
        try:
            self.net = read_policy(path)
            self.setup(settings)
        except (PolicyFileError, LayoutError, KeyError, TypeError, ValueError) as exc:
            raise t.error("policy", str(exc)) from None
        key = "target_deg" if self.net.meta.get("target_unit", "deg") == "deg" else "target_m"
        target = t.get(key, None)
        t.done()
        try:
            self.target = policy_target(self.net.meta, target)
        except (PolicyFileError, TypeError, ValueError):
            raise t.error(key, f"{self.net.meta['n_target']} finite value(s), not {target!r}") from None

    def setup(self, settings: ControllerSettings) -> None:
        """The layouts of the file against the run's channels and frame."""
        meta = self.net.meta
        action = ActionLayout(**{k: tuple(v) if isinstance(v, list) else v for k, v in meta["action"].items()})
        if max(action.channels, default=-1) >= len(settings.channel_names):
            raise PolicyFileError(f"the policy drives channel {max(action.channels) + 1}; the run has "
                                  f"{len(settings.channel_names)}")
        self.action = action
        self.low, self.high = action.bounds()
        self.frame_items = tuple(meta["observe"])
        self.dof_names = settings.dof_names
        self.obs = np.zeros((1, self.net.obs_mean.shape[0]))
        self.layout = self._observation_layout(settings)

    def _observation_layout(self, settings: ControllerSettings) -> ObservationLayout | None:
        """The observation's layout on the run's frame, so that an item the run does not give (a lab sensor it
        has not configured, what its plant does not model) is a config error, not a plug-in failing every call;
        None where the frame is not known before the first one."""
        unmodelled = [item for item in self.frame_items if item.partition("[")[0] in settings.unmodelled_fields]
        if unmodelled:
            raise PolicyFileError(f"the policy observes {', '.join(unmodelled)}, which this run's plant does not "
                                  "model (NaN in every frame)")
        if settings.frame_dtype is None:
            return None
        layout = ObservationLayout(self.frame_items, settings.frame_dtype, self.dof_names,
                                   int(self.net.meta["n_target"]))
        if layout.size != self.obs.shape[1]:
            raise PolicyFileError(f"the run's frame gives {layout.size} observation values, the network takes "
                                  f"{self.obs.shape[1]}")
        return layout

    def step(self, tick: int, time_s: float, frame):
        if frame is None:
            return []
        if self.layout is None:
            self.layout = ObservationLayout(self.frame_items, frame.dtype, self.dof_names, self.target.shape[0])
        self.layout.fill(frame, self.target[None, :], self.obs)
        action = np.clip(self.net.act(self.obs[0]), self.low, self.high)
        return [ChannelCommand(c + 1, pw, amp, freq) for c, pw, amp, freq in self.action.commands(action)]


def policy_target(meta: dict, value) -> np.ndarray:
    """The target (SI) from the config's ``target``: degrees for an angle task, metres for a point."""
    n, unit = int(meta["n_target"]), meta.get("target_unit", "deg")
    values = np.atleast_1d(np.asarray(meta.get("default_target", [0.0] * n) if value is None else value, float))
    if values.shape != (n,) or not np.all(np.isfinite(values)):
        raise PolicyFileError(f"target: {n} finite value(s) in {unit}")
    return np.radians(values) if unit == "deg" else values
