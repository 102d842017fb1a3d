"""Stable-Baselines3's ``VecEnv`` over the batched arms (``stable-baselines3`` is needed for this module only).

SB3 resets an environment inside the step that ended its episode and hands the last observation over in
``infos[i]["terminal_observation"]`` (``"TimeLimit.truncated"`` says a time limit ended it) and the episode's
return and length in ``infos[i]["episode"]`` (what SB3's ``Monitor`` adds, for its logs); this adapter does so on :class:`hil.gym.episodes.Episodes`, the same arms and episodes as the Gymnasium vector environment.
"""
from __future__ import annotations

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from hil.gym import arguments
from hil.gym.arguments import action_array
from hil.gym.episodes import Episodes


class FesArmSb3VecEnv(VecEnv):
    """``num_envs`` arms on ``task`` (keyword arguments as :mod:`hil.gym.env`; ``seed``: of the first reset)."""

    render_mode = None
    """None, or ``"rgb_array"``: :meth:`get_images` draws the arms (SB3's ``VecEnv`` asks for it)."""

    def __init__(self, task: str, num_envs: int = 1, seed: int | None = None, render_mode: str | None = None,
                 **kwargs) -> None:
        self.render_mode = arguments.render_mode(render_mode)
        self.episodes = Episodes(task, num_envs, **kwargs)
        super().__init__(num_envs, self.episodes.observation_space, self.episodes.action_space)
        self.observation_labels = self.episodes.observation_labels
        self.dt = self.episodes.action_period_s      # simulated seconds per step, as the single environment's
        if seed is not None:
            self.seed(seed)
        self._actions = np.zeros((num_envs, self.episodes.action_space.shape[0]))
        self._all = np.ones(num_envs, bool)
        self._returns, self._lengths = np.zeros(num_envs), np.zeros(num_envs, np.int64)

    def reset(self):
        """Every arm's next episode, with the seeds of :meth:`seed` (which ``PPO(..., seed=s)`` calls) and the
        options of :meth:`set_options`, each used once, as Stable-Baselines3's own vector environments do; all
        checked before any arm is reset."""
        seeds = arguments.vector_seeds(list(self._seeds), self.num_envs)
        if len(self._options) != self.num_envs:
            raise arguments.ArgumentError(f"set_options: one dict for every arm or a list of {self.num_envs}, not "
                                          f"{len(self._options)} dicts")
        checked = [self.episodes.checked_options(options or None) for options in self._options]
        for i in range(self.num_envs):
            self.episodes.start_episode(i, seeds[i], checked[i])
        self._reset_seeds()
        self._reset_options()
        self._returns[:], self._lengths[:] = 0.0, 0
        return self.episodes.obs.copy()

    def step_async(self, actions) -> None:
        self._actions[:] = action_array(actions, self._actions.shape)

    def step_wait(self):
        ep = self.episodes
        ep.step(self._actions, self._all)
        terminated, truncated = ep.terminated(), ep.truncated()
        rewards = ep.rewards.astype(np.float32)
        infos = [ep.info(i) for i in range(self.num_envs)]
        obs = ep.obs.copy()
        self._returns += ep.rewards
        self._lengths += 1
        for i in np.flatnonzero(terminated | truncated):
            infos[i]["terminal_observation"] = obs[i].copy()
            infos[i]["TimeLimit.truncated"] = bool(truncated[i])
            infos[i]["episode"] = {"r": float(self._returns[i]), "l": int(self._lengths[i]), "t": 0.0}
            self._returns[i], self._lengths[i] = 0.0, 0
            ep.reset_arm(i)
            obs[i] = ep.obs[i]
        return obs, rewards, terminated | truncated, infos

    def close(self) -> None:
        pass

    def get_images(self):
        """Each arm's posture as an RGB image (:mod:`hil.gym.render`; SB3's ``render`` tiles them), or Nones."""
        if self.render_mode != "rgb_array":
            return [None] * self.num_envs
        return self.episodes.pictures()

    def get_attr(self, attr_name, indices=None):
        """``attr_name`` for each arm of ``indices``: the adapter's own value, which every arm shares (the spaces,
        ``render_mode``, ``dt``, ``observation_labels``)."""
        value = getattr(self, attr_name)
        return [value for _ in self._indices(indices)]

    def set_attr(self, attr_name, value, indices=None) -> None:
        """Set an attribute every arm shares; for some arms only it is refused (the arms are one batch)."""
        if len(self._indices(indices)) != self.num_envs:
            raise arguments.ArgumentError(f"set_attr {attr_name}: the arms are one batch and share it; set it for "
                                          "all of them (indices=None)")
        setattr(self, attr_name, value)

    def env_method(self, method_name, *args, indices=None, **kwargs):
        """A single environment's method on each arm of ``indices``, as SB3 calls it on each of its environments:
        ``reset(seed=None, options=None)`` (that arm's next episode: its (observation, info)) or ``render()``
        (that arm's picture, or None without ``render_mode="rgb_array"``)."""
        arms = self._indices(indices)
        if method_name == "reset":
            return [self._reset_arm(i, *args, **kwargs) for i in arms]
        if method_name == "render":
            if args or kwargs:
                raise arguments.ArgumentError("env_method render: takes no arguments")
            return [self.episodes.picture(i) if self.render_mode == "rgb_array" else None for i in arms]
        raise arguments.ArgumentError(f"env_method {method_name!r}: an arm answers reset and render (the arms are one "
                                      "batch, not separate environment objects)")

    def env_is_wrapped(self, wrapper_class, indices=None):
        return [False for _ in self._indices(indices)]

    def _reset_arm(self, i: int, seed: int | None = None, options: dict | None = None):
        """Arm i's next episode, as the single environment's ``reset(seed=, options=)``; its return and length
        start again."""
        self.episodes.reset_arm(i, seed, options)
        self._returns[i], self._lengths[i] = 0.0, 0
        return self.episodes.obs[i].copy(), self.episodes.info(i)

    def _indices(self, indices) -> list[int]:
        """The arms ``indices`` names (None: all; an int or a sequence of ints, each in range)."""
        if indices is None:
            return list(range(self.num_envs))
        chosen = [indices] if isinstance(indices, (int, np.integer)) else list(indices)
        bad = [i for i in chosen if not isinstance(i, (int, np.integer)) or not 0 <= i < self.num_envs]
        if bad:
            raise arguments.ArgumentError(f"indices: arm numbers from 0 to {self.num_envs - 1}, not {bad[0]!r}")
        return [int(i) for i in chosen]
