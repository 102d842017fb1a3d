"""``hil bench gym``: env steps per second of the Gymnasium environments (:mod:`hil.gym`), batched against
Gymnasium's ``SyncVectorEnv`` over the single environment, for each plant and number of environments, measured
by :mod:`hil.bench.throughput` (per core: env steps per CPU-second of the process, all threads), beside the
MyoSuite peer (:mod:`hil.bench.myo_peer`) in the same run.
"""
from __future__ import annotations

import gymnasium as gym

import hil.gym
from hil.bench.throughput import Throughput, measure_factory

TASK = "ElbowHold"


def batched(task: str, plant: str, n: int, threads: int):
    """The batched vector environment (the registered vector entry point)."""
    return gym.make_vec(f"{hil.gym.NAMESPACE}/{task}-v0", num_envs=n, vectorization_mode="vector_entry_point",
                        plant=plant, threads=threads)


def synced(task: str, plant: str, n: int):
    """Gymnasium's SyncVectorEnv over ``n`` single environments (each through ``gym.make``'s wrappers)."""
    return gym.make_vec(f"{hil.gym.NAMESPACE}/{task}-v0", num_envs=n, vectorization_mode="sync", plant=plant)


def single(task: str, plant: str):
    return gym.make(f"{hil.gym.NAMESPACE}/{task}-v0", plant=plant)


def gym_rows(plants=("das3", "mtg"), counts=(1, 8, 64), steps: int = 4000, threads: int = 1,
             task: str = TASK, seed: int = 0) -> list[Throughput]:
    """For each plant: the single environment, then for each count the batched and the synced vector
    environments (``steps`` env steps each, after a warm-up of ``min(steps, 200)`` steps)."""
    rows, warmup = [], min(steps, 200)
    for plant in plants:
        rows.append(measure_factory(lambda: single(task, plant), steps, warmup, seed, f"{plant} single"))
        for n in counts:
            rows.append(measure_factory(lambda: batched(task, plant, n, threads), steps, warmup, seed,
                                        f"{plant} batched"))
            rows.append(measure_factory(lambda: synced(task, plant, n), steps, warmup, seed, f"{plant} sync"))
    return rows


def speedups(rows: list[Throughput]) -> dict[tuple[str, int], float]:
    """(plant, n) -> batched env steps per CPU-second / synced ones."""
    by = {(r.label, r.num_envs): r for r in rows}
    out = {}
    for (label, n), row in by.items():
        plant, kind = label.split(" ", 1)
        if kind == "batched" and (f"{plant} sync", n) in by:
            out[(plant, n)] = row.steps_per_cpu_s / by[(f"{plant} sync", n)].steps_per_cpu_s
    return out
