"""The single Gymnasium environment of a task (``gymnasium.make("fes_hil/ElbowHold-v0", ...)``): one arm.

Keyword arguments of ``make`` (and of the vector environment's ``make_vec``):

- ``plant``: ``"das3"`` (default) or ``"mtg"``; ``config``: another service config (its stimulation channels must
  include the task's);
- ``action_kind``: ``"level"`` (default; each channel's amplitude as a fraction of its limit), ``"amplitude_ma"``
  or ``"pw_amp_freq"`` (:mod:`drivers.controllers.policy_io`); ``pulse_width_us``, ``frequency_hz``: the fixed
  pulse width and frequency of the first two kinds;
- ``action_period_s`` (the task's default: 20 ms), ``duration_s``: the episode's length;
- ``observe``: the frame items observed (the task's default, :mod:`hil.gym.tasks`, less what the plant does not
  model; naming such an item is refused);
- ``weights``: the reward's :class:`hil.gym.tasks.RewardWeights`;
- ``hand_load_kg``: (low, high) of the hand load drawn each episode (the task's default range);
- ``render_mode``: None or ``"rgb_array"`` (:meth:`render` draws the arm, :mod:`hil.gym.render`).
"""
from __future__ import annotations

import gymnasium as gym
import numpy as np

from hil.gym import arguments
from hil.gym.episodes import Episodes


class FesArmEnv(gym.Env):
    """One arm on one task (:mod:`hil.gym.episodes`); ``terminated`` on a safety stop, divergence or fibre
    collapse, ``truncated`` at the episode's length."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, task: str, render_mode: str | None = None, **kwargs) -> None:
        kwargs.pop("threads", None)
        self.render_mode = arguments.render_mode(render_mode)
        self.episodes = Episodes(task, 1, **kwargs)
        self.metadata = {**self.metadata, "render_fps": 1.0 / self.episodes.action_period_s}
        self.action_space = self.episodes.action_space
        self.observation_space = self.episodes.observation_space
        self.observation_labels = self.episodes.observation_labels
        self.dt = self.episodes.action_period_s      # simulated seconds per step (MuJoCo environments' name)
        self._one = np.ones(1, bool)
        self._action = np.zeros((1, self.action_space.shape[0]))

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.episodes.reset_arm(0, seed, options)
        return self.episodes.obs[0].copy(), self.episodes.info(0)

    def render(self):
        """The arm's posture as an RGB image (H, W, 3) when ``render_mode="rgb_array"``, else None."""
        return self.episodes.picture(0) if self.render_mode == "rgb_array" else None

    def step(self, action):
        self._action[0] = arguments.action_array(action, self.action_space.shape)
        ep = self.episodes
        ep.step(self._action, self._one)
        return (ep.obs[0].copy(), float(ep.rewards[0]), bool(ep.terminated()[0]), bool(ep.truncated()[0]),
                ep.info(0))
