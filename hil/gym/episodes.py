"""The episodes of N arms on one task: targets, observations, rewards, endings; shared by the single environment
(N = 1, :mod:`hil.gym.env`) and the vector environment (:mod:`hil.gym.vector`), so both compute the same thing.

Seeding: arm i draws its episodes (target, hand load, sensor-noise seed) from its own generator, seeded by the
``seed`` given to a reset (the vector environment gives arm i ``seed + i``, as Gymnasium's ``SyncVectorEnv`` gives
its i-th environment) and continued by later resets without a seed.

Reset options (all optional): ``patient`` (a preset name or patient file, :mod:`hil.patients`; the arm is built
again when it changes), ``target`` (the task's target parameters: rad, or m for a point), ``target_deg`` (an
angle target's first parameter in degrees), ``hand_load_kg``, ``reference`` (a recorded motion, .mot/.sto/.trc/.c3d:
the target follows it, resampled at the action period and held at its last value; ElbowHold: the elbow flexion,
ForwardFlexion: the thoracohumeral elevation, Reach: the hand position of the 11 recorded coordinates;
:mod:`sim.motion.reference`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gymnasium import spaces
from gymnasium.utils import seeding

from hil.config import load_service_config
from hil.gym import arguments
from hil.gym.arm_batch import ENDINGS, RUNNING, ArmBatch, ticks_per_action
from hil.gym.render import arm_picture
from hil.gym.tasks import TASKS, RewardWeights, Task
from hil.patients import patient_override
from hil.rt.plants import plant_type


@dataclass(frozen=True)
class ResetOptions:
    """A reset's options as checked (:meth:`Episodes.checked_options`); None: not given. ``recorded``: the
    reference motion's angles at every action step (:meth:`hil.gym.tasks.Task.read_reference`)."""

    patient: str | None = None
    hand_kg: float | None = None
    target: np.ndarray | None = None
    target_deg: float | None = None
    recorded: np.ndarray | None = None


class Episodes:
    """``n`` arms on ``task``; keyword arguments as :mod:`hil.gym.env` documents."""

    def __init__(self, task: str | Task, n: int, plant: str = "das3", config: str | None = None,
                 action_kind: str = "level", action_period_s: float | None = None,
                 duration_s: float | None = None, observe=None, weights: RewardWeights | None = None,
                 pulse_width_us: float = 300.0, frequency_hz: float = 40.0, threads: int = 1,
                 hand_load_kg: tuple[float, float] | None = None) -> None:
        self.task = TASKS[arguments.task_name(task, TASKS)] if not isinstance(task, Task) else task
        t = self.task
        cfg = load_service_config(config or t.config_file(plant))
        period = cfg.loop.period_s
        action_period_s = arguments.seconds("action_period_s", t.action_period_s if action_period_s is None
                                            else action_period_s, arguments.MAX_ACTION_PERIOD_S)
        duration_s = arguments.seconds("duration_s", t.duration_s if duration_s is None else duration_s,
                                       arguments.MAX_DURATION_S)
        self.ticks_per_action = ticks_per_action(action_period_s, period)
        self.action_period_s = self.ticks_per_action * period
        self.max_steps = max(1, int(round(duration_s / self.action_period_s)))
        self.weights = arguments.reward_weights(t.weights if weights is None else weights, RewardWeights)
        self.hand_load_kg = arguments.hand_load_range(hand_load_kg if hand_load_kg is not None else t.hand_load_kg)
        observe = arguments.modelled_items(arguments.observed_items(t.observe if observe is None else observe),
                                           plant_type(cfg.plant.type).unmodelled_fields, observe is not None)
        self.arms = ArmBatch(cfg, n, t.channels[cfg.plant.type], observe, t.n_target,
                             self.ticks_per_action, action_kind, pulse_width_us, frequency_hz, threads)
        self.n = n
        low, high = self.arms.actions.bounds()
        self.action_space = spaces.Box(low.astype(np.float32), high.astype(np.float32), dtype=np.float32)
        size = self.arms.observation.size
        self.observation_space = spaces.Box(-np.inf, np.inf, (size,), np.float32)
        self.observation_labels = self.arms.observation.labels
        self.rngs = [seeding.np_random(None)[0] for _ in range(n)]
        n_params = len(t.target_range)
        self.params, self.targets = np.zeros((n, n_params)), np.zeros((n, t.n_target))
        self.start, self.steps = np.zeros(n), np.zeros(n, np.int64)
        self.obs = np.zeros((n, size), np.float32)
        self.errors, self.rewards = np.zeros(n), np.zeros(n)
        self.references: list[np.ndarray | None] = [None] * n
        self._referenced = np.zeros(n, np.bool_)
        self._ending_names = np.array(ENDINGS)

    # -- resets ------------------------------------------------------------------------------------------
    def reset_arm(self, i: int, seed: int | None = None, options: dict | None = None) -> None:
        """Arm ``i``'s next episode (a new generator when ``seed`` is given); the options are checked first."""
        self.start_episode(i, seed, self.checked_options(options))

    def checked_options(self, options: dict | None) -> ResetOptions:
        """The reset ``options`` checked, and a reference motion read, before any arm is touched."""
        options, t = arguments.reset_options(options), self.task
        patient = arguments.patient_name(options.pop("patient", None))
        hand_kg = options.pop("hand_load_kg", None)
        target = options.pop("target", None)
        target_deg = options.pop("target_deg", None)
        reference = options.pop("reference", None)
        if options:
            raise arguments.ArgumentError(f"unknown reset option(s): {', '.join(map(str, options))} "
                                          "(patient, target, target_deg, hand_load_kg, reference)")
        return ResetOptions(
            patient, None if hand_kg is None else arguments.hand_load(hand_kg),
            None if target is None else arguments.target_parameters(target, t.target_limits, t.target_unit),
            None if target_deg is None else arguments.degrees(target_deg, t.target_limits[0]),
            None if reference is None else t.read_reference(reference, self.action_period_s))

    def start_episode(self, i: int, seed: int | None, options: ResetOptions) -> None:
        """Arm ``i``'s next episode with checked ``options``; a patient the arm cannot be built for leaves the
        arm and its generator as they were."""
        t = self.task
        rng = self.rngs[i] if seed is None else seeding.np_random(seed)[0]
        drawn_from = rng.bit_generator.state
        noise_seed = int(rng.integers(2**63))
        low, high = self.hand_load_kg
        hand_kg = options.hand_kg
        if hand_kg is None:
            hand_kg = float(rng.uniform(low, high) if high > low else low)
        try:
            self.arms.reset_arm(i, noise_seed, hand_kg, patient_override(options.patient), options.patient)
        except BaseException:
            rng.bit_generator.state = drawn_from
            raise
        self.rngs[i] = rng
        params = t.sample_parameters(rng, self.arms.frames[i:i + 1])     # drawn even when given: the same stream
        if options.target is not None:
            params = options.target
        if options.target_deg is not None:
            params = params.copy()
            params[0] = options.target_deg
        recorded = options.recorded
        self.references[i] = None if recorded is None else t.reference_targets(recorded, self.arms.segment_model(i).arrays)
        self._referenced[i] = recorded is not None
        self.params[i] = params
        self.start[i] = t.start_values(self.arms.frames[i:i + 1])[0]
        self.steps[i] = 0
        self._observe(np.arange(i, i + 1))

    # -- steps -------------------------------------------------------------------------------------------
    def step(self, actions: np.ndarray, stepping: np.ndarray) -> None:
        """One action step of the arms where ``stepping``: frames, observations, rewards, errors."""
        self.arms.step(arguments.action_array(actions, (self.n, self.action_space.shape[0])), stepping)
        self.steps[stepping] += 1
        idx = np.flatnonzero(stepping)
        self._observe(idx)
        w = self.weights
        unstable = self.arms.frames["gh_stability"][idx] > 0.0
        self.rewards[idx] = (-self.errors[idx] / w.error_scale - w.effort * self.arms.effort[idx]
                             - w.gh_unstable * unstable)

    def _observe(self, idx: np.ndarray) -> None:
        """Targets at the arms' times, tracking errors and observations of arms ``idx``."""
        if idx.shape[0] == 0:
            return
        rows = self.arms.rows(idx)
        frames = self.arms.frames[rows]
        targets = self.targets[idx]
        self.task.targets(self.params[rows], self.steps[rows] * self.action_period_s, self.start[rows], targets)
        for k in np.flatnonzero(self._referenced[idx]).tolist():       # the arms following a recorded motion
            ref = self.references[idx[k]]
            targets[k] = ref[min(self.steps[idx[k]], ref.shape[0] - 1)]
        self.targets[idx] = targets
        errors = np.zeros(idx.shape[0])
        self.task.errors(frames, targets, errors)
        self.errors[idx] = errors
        obs = np.zeros((idx.shape[0], self.obs.shape[1]))
        self.arms.observation.fill(frames, targets, obs)
        self.obs[idx] = obs

    def terminated(self) -> np.ndarray:
        return self.arms.status != RUNNING

    def truncated(self) -> np.ndarray:
        return (self.steps >= self.max_steps) & ~self.terminated()

    def picture(self, i: int) -> np.ndarray:
        """Arm ``i``'s posture now (the plant's, not the sensed one) drawn as an RGB image (:mod:`hil.gym.render`)."""
        das3 = self.arms.segment_model(i)
        return arm_picture(das3.arrays, self.arms.arms[i].engine.plant.outputs.q, das3.config.length_scale)

    def pictures(self) -> list[np.ndarray]:
        """:meth:`picture` of every arm."""
        return [self.picture(i) for i in range(self.n)]

    def infos(self) -> dict:
        """Every arm's step information as arrays (:meth:`info`'s numbers and ``termination``)."""
        return {"error": self.errors.copy(), "effort": self.arms.effort.copy(),
                "time_s": self.arms.time_s(), "termination": self._ending_names[self.arms.status]}

    def info(self, i: int) -> dict:
        """Arm ``i``'s step information: error (rad or m), effort, time (s), why its episode ended."""
        arms = self.arms
        return {"error": float(self.errors[i]), "effort": float(arms.effort[i]),
                "time_s": float(arms.ticks[i] * arms.period_s), "termination": ENDINGS[arms.status[i]],
                "detail": arms.arms[i].detail, "target": self.targets[i].copy()}
