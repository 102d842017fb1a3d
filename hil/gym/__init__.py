"""Gymnasium environments of the virtual arm (``import hil.gym`` registers them): ``fes_hil/<Task>-v0`` for each
task of :mod:`hil.gym.tasks`, with the single environment (:mod:`hil.gym.env`) as entry point and the batched one
(:mod:`hil.gym.vector`) as vector entry point."""
from __future__ import annotations

import gymnasium as gym

from hil.gym.tasks import TASKS

NAMESPACE = "fes_hil"


def environment_ids() -> tuple[str, ...]:
    return tuple(f"{NAMESPACE}/{name}-v0" for name in TASKS)


def register_environments() -> None:
    """Register every task once (again on a second import: Gymnasium keeps the first)."""
    for name, env_id in zip(TASKS, environment_ids()):
        if env_id not in gym.registry:
            gym.register(env_id, entry_point="hil.gym.env:FesArmEnv",
                         vector_entry_point="hil.gym.vector:FesArmVectorEnv", kwargs={"task": name})


register_environments()
