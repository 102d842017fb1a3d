"""The vector environment of a task: N arms in one batch (:mod:`hil.gym.arm_batch`), each arm's trajectory the
single environment's bit for bit. Gymnasium 1.x next-step autoreset: the step after an arm's episode ends resets
it (its action is ignored; reward 0, neither terminated nor truncated) and returns its first observation.

``gymnasium.make_vec("fes_hil/ElbowHold-v0", num_envs=N, vectorization_mode="vector_entry_point", threads=T)``
takes the single environment's keyword arguments (:mod:`hil.gym.env`) and ``threads``: numba threads stepping the
arms (1 by default; more pay on a machine with more free cores than the batch's Python needs).
"""
from __future__ import annotations

import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from hil.gym import arguments
from hil.gym.episodes import Episodes


class FesArmVectorEnv(VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP, "render_modes": ["rgb_array"]}

    def __init__(self, task: str, num_envs: int = 1, render_mode: str | None = None, **kwargs) -> None:
        self.render_mode = arguments.render_mode(render_mode)
        self.episodes = Episodes(task, num_envs, **kwargs)
        self.num_envs = num_envs
        self.single_action_space = self.episodes.action_space
        self.single_observation_space = self.episodes.observation_space
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.observation_labels = self.episodes.observation_labels
        self.dt = self.episodes.action_period_s      # simulated seconds per step (MuJoCo environments' name)
        self._autoreset = np.zeros(num_envs, bool)
        self._present = np.ones(num_envs, bool)

    def reset(self, *, seed=None, options: dict | None = None):
        seeds, checked = arguments.vector_seeds(seed, self.num_envs), self.episodes.checked_options(options)
        for i in range(self.num_envs):
            self.episodes.start_episode(i, seeds[i], checked)
        self._autoreset[:] = False
        return self.episodes.obs.copy(), self._infos()

    def step(self, actions):
        ep = self.episodes
        resetting = self._autoreset.copy()
        if resetting.any():
            for i in np.flatnonzero(resetting).tolist():
                ep.reset_arm(i)
        ep.step(actions, ~resetting)
        terminated, truncated = ep.terminated(), ep.truncated()
        rewards = ep.rewards.copy()
        rewards[resetting] = 0.0
        terminated[resetting] = truncated[resetting] = False
        self._autoreset = terminated | truncated
        return ep.obs.copy(), rewards, terminated, truncated, self._infos()

    def render(self):
        """Each arm's posture as an RGB image when ``render_mode="rgb_array"`` (a tuple, as Gymnasium's vector
        environments give), else None."""
        if self.render_mode != "rgb_array":
            return None
        return tuple(self.episodes.pictures())

    def _infos(self) -> dict:
        """Gymnasium's vector info: each key's array and its mask ``_key`` (every arm has every key)."""
        infos = self.episodes.infos()
        infos.update({"_" + key: self._present for key in list(infos)})
        return infos
