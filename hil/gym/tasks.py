"""The environments' tasks: what each one's config, channels, observation, target, reward and episode are.

Rewards are per action step, in SI units and radians, all vectorised over a batch of N arms:

    r = - e / e_scale - w_effort * mean_c (I_c / I_max,c)^2 - w_gh * [GH stability > 0]

with e the task's tracking error (rad, or m for the hand), I_c the amplitude applied to channel c (after the
safety rules) and I_max,c its limit, and the GH term only where the plant models the GH joint (the DAS3 arm:
stability > 0 means the joint force points outside the glenoid rim, Chadwick et al. 2014 eq. 9). The weights
are *proposals* of this project (keyword arguments of every environment).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import ClassVar

import numpy as np

from hil.gym.arguments import ArgumentError
from sim.das3.model import DOF_NAMES
from sim.motion.reference import hand_positions, reference_trajectory, thoracohumeral_angles

CONFIG_DIR = Path(__file__).resolve().parents[1].parent / "configs" / "gym"
"""The environments' service configs (a source checkout's configs/gym)."""
G = 9.80665
"""Standard gravity, m/s^2 (the hand load's weight)."""


@dataclass(frozen=True)
class RewardWeights:
    """The reward's weights (*proposals*): error scale (rad or m), effort and GH instability."""

    error_scale: float = 1.0
    effort: float = 0.1
    gh_unstable: float = 1.0


@dataclass(frozen=True)
class Task:
    """One task. ``configs``: the service config of each plant type; ``channels``: the stimulation channels its
    actions drive, by plant type; ``observe``: the frame items observed (:mod:`drivers.controllers.policy_io`);
    ``n_target``: the target's size; ``duration_s`` and ``action_period_s``: the episode and how often the
    policy acts; ``target_range``: (low, high) of each sampled target parameter; ``target_limits``: (low, high) of
    each target parameter a reset may give (*proposals*: what is physically meaningful), in ``target_unit``;
    ``hand_load_kg``: (low, high) of the sampled hand load."""

    name: str
    doc: str
    configs: dict
    channels: dict
    observe: tuple[str, ...]
    n_target: int
    target_range: tuple[tuple[float, float], ...]
    target_limits: tuple[tuple[float, float], ...]
    target_unit: str
    duration_s: float = 4.0
    action_period_s: float = 0.02
    hand_load_kg: tuple[float, float] = (0.0, 0.0)
    weights: RewardWeights = RewardWeights()

    def config_file(self, plant: str) -> Path:
        if plant not in self.configs:
            raise ArgumentError(f"{self.name}: no {plant!r} plant (one of {', '.join(self.configs)})")
        return CONFIG_DIR / self.configs[plant]

    def sample_parameters(self, rng: np.random.Generator, rest_frame: np.ndarray) -> np.ndarray:
        """One episode's target parameters, uniform in ``target_range`` (``rest_frame``: the arm's first frame)."""
        low, high = np.array(self.target_range).T
        return rng.uniform(low, high)

    def targets(self, params: np.ndarray, time_s: np.ndarray, start: np.ndarray, out: np.ndarray) -> None:
        """``out[i]``: env i's target at its episode time ``time_s[i]`` (``start[i]``: its observed start value)."""
        out[:] = params

    def errors(self, frames: np.ndarray, targets: np.ndarray, out: np.ndarray) -> None:
        """``out[i]``: env i's tracking error (>= 0)."""
        raise NotImplementedError

    def start_values(self, frames: np.ndarray) -> np.ndarray:
        """What the target moves from (a task with a moving target), from the first frames."""
        return np.zeros(frames.shape[0])

    reference_dofs: ClassVar[tuple[str, ...]] = ()
    """The DAS3 coordinates a reference trajectory of the task is made of (none: it takes no reference)."""

    def read_reference(self, path, period_s: float) -> np.ndarray:
        """The angles (rad) of :attr:`reference_dofs` at every action step of the recorded motion in ``path``
        (:mod:`sim.motion`): (steps, len(reference_dofs)); read and checked before any arm is reset."""
        if not self.reference_dofs:
            raise ArgumentError(f"{self.name} takes no reference trajectory")
        if not isinstance(path, (str, PathLike)):
            raise ArgumentError(f"reference: a motion file's path (.mot, .sto, .trc or .c3d), not "
                                f"{type(path).__name__}")
        return reference_trajectory(path, period_s, dofs=self.reference_dofs)[1]

    def reference_targets(self, q: np.ndarray, arrays) -> np.ndarray:
        """The target at every action step from the recorded angles ``q`` (:meth:`read_reference`):
        (steps, n_target); ``arrays``: the DAS3 arrays of the arm's segments (its size)."""
        return q


@dataclass(frozen=True)
class ElbowHold(Task):
    reference_dofs: ClassVar[tuple[str, ...]] = ("ELx",)

    def errors(self, frames, targets, out):
        np.abs(frames["elbow_flexion"] - targets[:, 0], out=out)


@dataclass(frozen=True)
class Reach(Task):
    """Targets: the resting hand position plus an offset uniform in ``target_range`` (thorax frame, m: x lateral,
    y up, z posterior, so a reach forward is a negative z)."""

    def sample_parameters(self, rng, rest_frame):
        return rest_frame["hand_position"][0] + super().sample_parameters(rng, rest_frame)

    reference_dofs: ClassVar[tuple[str, ...]] = tuple(DOF_NAMES)

    def reference_targets(self, q, arrays):
        """The hand position of the recorded DAS3 coordinates (all 11) on the arm's segments, by the plant's
        definition (a marker file gives the elbow only: :func:`sim.motion.reference.reference_trajectory`)."""
        return hand_positions(arrays, q)

    def errors(self, frames, targets, out):
        out[:] = np.sqrt(((frames["hand_position"] - targets) ** 2).sum(axis=1))


@dataclass(frozen=True)
class ForwardFlexion(Task):
    """Track a minimum-jerk rise of the thoracohumeral elevation (Flash & Hogan 1985) from its starting value to
    a peak, then hold; target parameters (peak elevation rad, rise time s)."""

    def targets(self, params, time_s, start, out):
        tau = np.clip(time_s / params[:, 1], 0.0, 1.0)
        shape = tau ** 3 * (10.0 - 15.0 * tau + 6.0 * tau ** 2)
        out[:, 0] = start + (params[:, 0] - start) * shape

    def start_values(self, frames):
        return frames["th_angles"][:, 1].copy()

    reference_dofs: ClassVar[tuple[str, ...]] = tuple(DOF_NAMES)

    def reference_targets(self, q, arrays):
        """The thoracohumeral elevation of the recorded DAS3 coordinates (all 11), by the plant's definition."""
        return thoracohumeral_angles(arrays, q)[:, 1:2]

    def errors(self, frames, targets, out):
        np.abs(frames["th_angles"][:, 1] - targets[:, 0], out=out)


TASKS = {t.name: t for t in (
    ElbowHold(
        "ElbowHold", "hold a target elbow flexion against a hand load with the biceps and triceps channels",
        configs={"das3": "elbow-hold.toml", "mtg": "elbow-hold-mtg.toml"},
        channels={"das3": ("biceps", "triceps"), "mtg": ("elbow_flexor", "elbow_extensor")},
        observe=("q[ELx]", "qdot[ELx]"), n_target=1,
        target_range=((math.radians(40.0), math.radians(110.0)),), target_limits=((-math.pi, math.pi),),
        target_unit="rad", hand_load_kg=(0.0, 0.5)),
    Reach(
        "Reach", "bring the hand to a target point in front of the shoulder with the eight channels of the "
        "default map", configs={"das3": "reach.toml", "mtg": "reach-mtg.toml"},
        channels={"das3": ("anterior_deltoid", "middle_deltoid", "posterior_deltoid", "biceps", "triceps",
                           "pectoralis_major", "serratus_anterior", "lower_trapezius"),
                  "mtg": ("horizontal_flexor", "horizontal_extensor", "elevator", "depressor", "internal_rotator",
                          "external_rotator", "elbow_flexor", "elbow_extensor")},
        observe=("q", "qdot", "hand_position"), n_target=3,
        target_range=((-0.05, 0.05), (0.0, 0.25), (-0.20, -0.05)), target_limits=((-1.5, 1.5),) * 3,
        target_unit="m, a point in the thorax frame", weights=RewardWeights(error_scale=0.1)),
    ForwardFlexion(
        "ForwardFlexion", "raise the arm forward along a minimum-jerk elevation profile and hold it",
        configs={"das3": "forward-flexion.toml", "mtg": "forward-flexion-mtg.toml"},
        channels={"das3": ("anterior_deltoid", "middle_deltoid", "posterior_deltoid", "pectoralis_major",
                           "serratus_anterior", "lower_trapezius"),
                  "mtg": ("horizontal_flexor", "horizontal_extensor", "elevator", "depressor")},
        observe=("q", "qdot", "th_angles", "gh_stability"), n_target=1,
        target_range=((math.radians(40.0), math.radians(80.0)), (1.0, 2.0)),
        target_limits=((-math.pi, math.pi), (0.02, 60.0)), target_unit="rad, s", duration_s=3.0),
)}
"""The registered tasks by name (``fes_hil/<name>-v0``). The Reach offsets (the DAS3 thorax frame: x lateral,
y up, z posterior; m) are a *proposal*: a box in front of and above the resting hand, not every point of which the electrode set can
reach."""
