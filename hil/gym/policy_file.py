"""Save a trained policy for the ``policy`` controller plug-in (:mod:`drivers.controllers.policy`).

:func:`save_network` writes any multilayer perceptron given as arrays; :func:`save_sb3_policy` takes it from a
Stable-Baselines3 actor-critic policy with a Gaussian action distribution (PPO, A2C): the deterministic action
is the distribution's mean, the action network applied to the policy branch of the MLP extractor (SB3's
``MlpExtractor``: linear layers with one activation, then ``action_net``). Torch is only needed to call the
latter.
"""
from __future__ import annotations

import json

import numpy as np

from hil.gym.episodes import Episodes
from sim.output_file import output_file

TARGET_UNITS = {"ElbowHold": "deg", "ForwardFlexion": "deg", "Reach": "m"}


def policy_meta(episodes: Episodes, activation: str, n_layers: int, obs_clip: float) -> dict:
    """What the plug-in needs besides the weights: the task, layouts, target unit and default target."""
    task = episodes.task
    unit = TARGET_UNITS[task.name]
    default = [float(np.degrees(lo + hi) / 2) if unit == "deg" else 0.0 for lo, hi in task.target_range][:task.n_target]
    return {"task": task.name, "activation": activation, "n_layers": n_layers, "obs_clip": obs_clip,
            "observe": [item.label for item in episodes.arms.observation.items], "n_target": task.n_target,
            "target_unit": unit, "default_target": default, "action": episodes.arms.actions.to_dict(),
            "action_size": episodes.arms.actions.size, "action_period_s": episodes.action_period_s}


def save_network(path: str, episodes: Episodes, layers, activation: str = "tanh", obs_mean=None, obs_var=None,
                 obs_clip: float = float("inf")) -> None:
    """Write ``layers`` ([(W, b), ...], the last linear) with the observation normalisation (none: identity)."""
    size = episodes.arms.observation.size
    arrays = {f"W{k}": np.asarray(w, float) for k, (w, _) in enumerate(layers)}
    arrays.update({f"b{k}": np.asarray(b, float) for k, (_, b) in enumerate(layers)})
    arrays["obs_mean"] = np.zeros(size) if obs_mean is None else np.asarray(obs_mean, float)
    arrays["obs_var"] = np.ones(size) if obs_var is None else np.asarray(obs_var, float)
    arrays["meta"] = np.array(json.dumps(policy_meta(episodes, activation, len(layers), obs_clip)))
    with output_file(path, "wb") as f:
        np.savez(f, **arrays)


def save_sb3_policy(path: str, model, episodes: Episodes, obs_rms=None, obs_clip: float = float("inf")) -> None:
    """The deterministic actor of an SB3 PPO/A2C ``model`` (``obs_rms``: a VecNormalize's running statistics)."""
    import torch.nn as nn

    policy = model.policy
    linears = [m for m in policy.mlp_extractor.policy_net if isinstance(m, nn.Linear)]
    acts = {type(m).__name__ for m in policy.mlp_extractor.policy_net if not isinstance(m, nn.Linear)}
    if acts - {"Tanh", "ReLU"} or len(acts) > 1:
        raise ValueError(f"activations {sorted(acts)}: the plug-in runs one of Tanh, ReLU")
    activation = "relu" if acts == {"ReLU"} else "tanh"
    layers = [(m.weight.detach().numpy(), m.bias.detach().numpy()) for m in (*linears, policy.action_net)]
    save_network(path, episodes, layers, activation, None if obs_rms is None else obs_rms.mean,
                 None if obs_rms is None else obs_rms.var, obs_clip)
