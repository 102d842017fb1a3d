"""What ``hil bench gym`` measures of our environments: env steps per second of the Gymnasium environments (:mod:`hil.gym`), batched against
Gymnasium's ``SyncVectorEnv`` over the single environment, for each plant and number of environments, measured
by :mod:`hil.bench.throughput` (per core: env steps per CPU-second of the process, all threads), beside the
MyoSuite peer (:mod:`hil.bench.myo_peer`) in the same run.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path

import gymnasium as gym

import hil.gym
from hil.bench.myo_peer import VENV, PeerUnavailable, measure_peer, setup_venv
from hil.bench.throughput import Throughput, machine, measure

TASK = "ElbowHold"


def batched(task: str, plant: str, n: int, threads: int, **kwargs):
    """The batched vector environment (the registered vector entry point)."""
    return gym.make_vec(f"{hil.gym.NAMESPACE}/{task}-v0", num_envs=n, vectorization_mode="vector_entry_point",
                        plant=plant, threads=threads, **kwargs)


def synced(task: str, plant: str, n: int, **kwargs):
    """Gymnasium's SyncVectorEnv over ``n`` single environments (each through ``gym.make``'s wrappers)."""
    return gym.make_vec(f"{hil.gym.NAMESPACE}/{task}-v0", num_envs=n, vectorization_mode="sync", plant=plant,
                        **kwargs)


def single(task: str, plant: str, **kwargs):
    return gym.make(f"{hil.gym.NAMESPACE}/{task}-v0", plant=plant, **kwargs)


def gym_rows(plants=("das3", "mtg"), counts=(1, 8, 64), steps: int = 4000, threads: int = 1,
             task: str = TASK, seed: int = 0, rounds: int = 3, action_period_s: float | None = None
             ) -> list[Throughput]:
    """For each plant: the single environment, then for each count the batched and the synced vector
    environments (``action_period_s``: the environments' action period; the task's by default), each measured
    ``rounds`` times in alternation (``steps`` env steps after a warm-up of
    ``min(steps, 200)``) and represented by its median round by steps per CPU-second: the machine's speed
    drifts, and alternating puts both sides of a ratio under the same drift."""
    rows, warmup = [], min(steps, 200)
    kw = {} if action_period_s is None else {"action_period_s": action_period_s}
    for plant in plants:
        env = single(task, plant, **kw)
        rows.append(median([measure(env, steps, warmup, seed, f"{plant} single", compiled_s=partial(compiled_seconds, env))
                            for _ in range(rounds)]))
        env.close()
        for n in counts:
            pair = {f"{plant} batched": batched(task, plant, n, threads, **kw),
                    f"{plant} sync": synced(task, plant, n, **kw)}
            measured = {label: [] for label in pair}
            for _ in range(rounds):
                for label, env in pair.items():
                    measured[label].append(measure(env, steps, warmup, seed, label, compiled_s=partial(compiled_seconds, env)))
            for label, env in pair.items():
                env.close()
                rows.append(median(measured[label]))
    return rows


def compiled_seconds(env) -> float:
    """Wall seconds the arms of ``env`` (a single, batched or synced environment of ours) spent in compiled
    plant calls so far (:attr:`hil.gym.arm_batch.ArmBatch.compiled_s`)."""
    envs = getattr(env, "envs", None) or [env]           # SyncVectorEnv: its single environments
    return sum(e.unwrapped.episodes.arms.compiled_s for e in envs)


def compiled_bound(rows: list[Throughput]) -> dict[tuple[str, int], float]:
    """(plant, n) -> the batched speed-up over sync if the batch spent no time outside its compiled calls:
    sync CPU-seconds per env step / the batch's compiled seconds per env step (Amdahl's bound for removing
    Python; with one numba thread, wall seconds in a compiled call are CPU-seconds)."""
    return {key: (sync.cpu_s / sync.env_steps) / batch.compiled_s_per_step
            for key, (batch, sync) in _pairs(rows).items() if batch.compiled_s and batch.cores_used < 1.05}


def median(measured: list[Throughput]) -> Throughput:
    """The round with the median steps per CPU-second (the upper median of an even count)."""
    return sorted(measured, key=lambda r: r.steps_per_cpu_s)[len(measured) // 2]


def speedups(rows: list[Throughput]) -> dict[tuple[str, int], float]:
    """(plant, n) -> batched env steps per CPU-second / synced ones."""
    return {key: batch.steps_per_cpu_s / sync.steps_per_cpu_s for key, (batch, sync) in _pairs(rows).items()}


def _pairs(rows: list[Throughput]) -> dict[tuple[str, int], tuple[Throughput, Throughput]]:
    """(plant, n) -> (the batched row, the synced row) of each plant and count that has both."""
    by = {(r.label, r.num_envs): r for r in rows}
    out = {}
    for (label, n), row in by.items():
        plant, kind = label.split(" ", 1)
        if kind == "batched" and (f"{plant} sync", n) in by:
            out[(plant, n)] = row, by[(f"{plant} sync", n)]
    return out


def with_peer(rows: list[Throughput], counts, steps: int, peer: bool, peer_setup: bool, say,
              venv: Path = VENV) -> tuple[dict, list]:
    """(the benchmark's document, the peer's rows): our ``rows``, their per-core speed-ups, and the MyoSuite
    peer's rows and models at the same counts (its virtual environment ``venv``, made first with ``peer_setup``;
    ``say`` prints the setup's line), or the one line saying why the peer did not run."""
    peer_rows, models, note = [], [], None
    if peer:
        try:
            if peer_setup:
                say(setup_venv(venv))
            result = measure_peer(tuple(counts), steps=steps, venv=venv)
            peer_rows, models = result.rows, result.models
        except PeerUnavailable as exc:
            note = str(exc)
    doc = {"machine": machine().as_dict(), "rows": [r.as_dict() for r in rows + peer_rows],
           "speedup_per_core": {f"{p} x{n}": round(v, 2) for (p, n), v in speedups(rows).items()},
           "speedup_bound_without_python": {f"{p} x{n}": round(v, 2) for (p, n), v in compiled_bound(rows).items()},
           "peer_models": [m.as_dict() for m in models], "peer_note": note}
    return doc, peer_rows
