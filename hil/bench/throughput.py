"""Env steps per second of a Gymnasium environment, wall clock and per CPU-second, behind ``hil bench gym``.

One measurement drives an :class:`gymnasium.Env` or a :class:`gymnasium.vector.VectorEnv` with random actions
from its action space (seeded, drawn before the clock starts, so sampling is not timed) for a warm-up and then
a fixed number of calls, and counts what the environment did:

- ``env_steps``: sub-environment steps requested, calls x ``num_envs`` (what a training library counts);
- ``episodes``: ``terminated | truncated`` flags seen;
- ``resets``: sub-environment resets, by Gymnasium 1.x autoreset mode (``envs.metadata["autoreset_mode"]``):
  NEXT_STEP resets an ended sub-environment in the call after its last step instead of stepping it
  (that slot simulates nothing); SAME_STEP resets it within the step that ended it; DISABLED leaves it to the
  caller, here ``reset(options={"reset_mask": done})``. A single Env is reset after its last step;
- ``sim_steps``: steps that advanced a simulation (``env_steps`` less NEXT_STEP's reset slots).

Throughput per core is env steps per CPU-second of this process and its child processes (all threads:
:func:`time.process_time`, plus /proc for an AsyncVectorEnv's workers), so a run on threads or workers is
charged for every core it kept busy; ``cores_used`` = CPU-seconds / wall seconds. Simulated seconds per wall
second (``sim_steps`` x control period / wall time) compares environments of different control periods.
The machine's load during the measurement is reported with it: hypervisor steal on this process's CPUs and
the CPU time other processes took (/proc/stat, proc(5)); both inflate wall time on a shared machine.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

import gymnasium as gym
import numpy as np

from hil.bench.platform import cpu_model, steal_s

ACTION_POOL = 256
"""Distinct random actions drawn before timing and cycled (the sampling cost stays out of the clock)."""


@dataclass(frozen=True)
class Machine:
    """The machine a measurement ran on."""

    cpu_model: str
    cpus: int            # logical CPUs of the machine (os.cpu_count)
    cpus_allowed: int    # CPUs this process may run on (sched_getaffinity)
    load_1min: float     # load average at the time of the probe

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Throughput:
    """One measurement: counts, wall and CPU time, and the machine's load while it ran."""

    label: str
    num_envs: int
    calls: int                     # step() calls measured
    env_steps: int
    sim_steps: int
    episodes: int
    resets: int
    wall_s: float
    cpu_s: float                   # this process (all threads) and its child processes
    threads: int                   # threads of this process and its children at the end
    control_period_s: float | None  # simulated time per env step
    steal_s: float | None          # hypervisor steal on this process's CPUs
    others_cpu_s: float | None     # CPU time of the rest of the machine (busy less ours)
    compiled_s: float | None = None  # wall time inside the environment's compiled plant calls, where it says

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / self.wall_s

    @property
    def steps_per_cpu_s(self) -> float:
        """Env steps per CPU-second: throughput per core."""
        return self.env_steps / self.cpu_s if self.cpu_s > 0 else float("nan")

    @property
    def cores_used(self) -> float:
        return self.cpu_s / self.wall_s

    @property
    def compiled_s_per_step(self) -> float | None:
        """Seconds of compiled plant calls per env step (None where the environment does not count them)."""
        return None if self.compiled_s is None else self.compiled_s / self.env_steps

    @property
    def sim_s_per_wall_s(self) -> float | None:
        if self.control_period_s is None:
            return None
        return self.sim_steps * self.control_period_s / self.wall_s

    def as_dict(self) -> dict:
        """The fields and the derived rates (JSON-ready)."""
        return {**asdict(self), "steps_per_s": self.steps_per_s, "steps_per_cpu_s": self.steps_per_cpu_s,
                "cores_used": self.cores_used, "sim_s_per_wall_s": self.sim_s_per_wall_s}

    @classmethod
    def from_dict(cls, doc: dict) -> Throughput:
        """The row :meth:`as_dict` wrote (derived rates are recomputed)."""
        return cls(**{f.name: doc[f.name] for f in fields(cls)})


def machine() -> Machine:
    """CPU model and count, the CPUs this process may use, the 1-minute load average."""
    return Machine(cpu_model=cpu_model(), cpus=os.cpu_count() or 1, cpus_allowed=len(_allowed_cpus()),
                   load_1min=os.getloadavg()[0])


def measure(env: gym.Env | gym.vector.VectorEnv, steps: int, warmup: int = 100, seed: int = 0, label: str = "",
            control_period_s: float | None = None, compiled_s: Callable[[], float] | None = None) -> Throughput:
    """Step ``env`` (an Env or a VectorEnv) for ``warmup`` env steps, then measure ``steps`` env steps
    (rounded up to whole calls of ``num_envs``). ``control_period_s``: simulated time per step; default the
    environment's ``dt`` where it has one. ``compiled_s``: the environment's running total of seconds in
    compiled plant calls, read before and after (the rest of a step is Python)."""
    vector = isinstance(env, gym.vector.VectorEnv)
    n = env.num_envs if vector else 1
    if steps < 1 or warmup < 0:
        raise ValueError(f"steps must be >= 1 and warmup >= 0 (got {steps}, {warmup})")
    env.action_space.seed(seed)
    actions = [env.action_space.sample() for _ in range(min(ACTION_POOL, max(1, -(-steps // n))))]
    stepper = _VectorStepper(env) if vector else _EnvStepper(env)
    env.reset(seed=seed)
    stepper.run(actions, -(-warmup // n))
    stepper.counts = np.zeros(3, np.int64)
    calls = -(-steps // n)
    compiled_before = compiled_s() if compiled_s else 0.0
    before = _Probe()
    stepper.run(actions, calls)
    after = _Probe()
    compiled = compiled_s() - compiled_before if compiled_s else None
    episodes, resets, reset_slots = (int(c) for c in stepper.counts)
    return Throughput(label=label, num_envs=n, calls=calls, env_steps=calls * n, sim_steps=calls * n - reset_slots,
                      episodes=episodes, resets=resets, wall_s=after.wall - before.wall,
                      cpu_s=after.cpu - before.cpu, threads=after.threads,
                      control_period_s=control_period_s if control_period_s is not None else _control_period(env),
                      steal_s=_delta(before.steal, after.steal),
                      others_cpu_s=_others(before, after), compiled_s=compiled)


def measure_factory(make: Callable[[], gym.Env | gym.vector.VectorEnv], steps: int, warmup: int = 100,
                    seed: int = 0, label: str = "", control_period_s: float | None = None) -> Throughput:
    """:func:`measure` on a fresh environment from ``make()``, closed afterwards (construction not timed)."""
    env = make()
    try:
        return measure(env, steps, warmup, seed, label, control_period_s)
    finally:
        env.close()


class _EnvStepper:
    """A single Env, reset after an episode's last step (counts: episodes, resets, reset slots)."""

    def __init__(self, env: gym.Env) -> None:
        self.env = env
        self.counts = np.zeros(3, np.int64)

    def run(self, actions: list, calls: int) -> None:
        env, pool = self.env, len(actions)
        for k in range(calls):
            _, _, terminated, truncated, _ = env.step(actions[k % pool])
            if terminated or truncated:
                env.reset()
                self.counts[:2] += 1


class _VectorStepper:
    """A VectorEnv under its autoreset mode (see the module docstring)."""

    def __init__(self, envs: gym.vector.VectorEnv) -> None:
        self.envs = envs
        mode = envs.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
        self.mode = gym.vector.AutoresetMode(mode)
        self.pending = np.zeros(envs.num_envs, bool)   # NEXT_STEP: sub-envs whose next call is a reset
        self.counts = np.zeros(3, np.int64)

    def run(self, actions: list, calls: int) -> None:
        envs, pool, mode = self.envs, len(actions), self.mode
        for k in range(calls):
            _, _, terminated, truncated, _ = envs.step(actions[k % pool])
            done = np.logical_or(terminated, truncated)
            self.counts[0] += done.sum()
            if mode is gym.vector.AutoresetMode.NEXT_STEP:
                slots = self.pending.sum()
                self.counts[1:] += slots
                self.pending = done
            elif mode is gym.vector.AutoresetMode.SAME_STEP:
                self.counts[1] += done.sum()
            elif done.any():
                envs.reset(options={"reset_mask": done})
                self.counts[1] += done.sum()


class _Probe:
    """Clocks and /proc counters at one instant."""

    def __init__(self) -> None:
        cpus = _allowed_cpus()
        steals = [steal_s(c) for c in cpus]
        self.steal = None if None in steals else sum(steals)
        self.busy = _machine_busy_s()
        children = _descendants()
        self.threads = _threads(os.getpid()) + sum(_threads(p) for p in children)
        self.cpu = time.process_time() + sum(_process_cpu_s(p) for p in children)
        self.wall = time.perf_counter()


def _allowed_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def _delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def _others(before: _Probe, after: _Probe) -> float | None:
    busy = _delta(before.busy, after.busy)
    return None if busy is None else max(0.0, busy - (after.cpu - before.cpu))


def _control_period(env) -> float | None:
    """The environment's ``dt`` (MuJoCo-style envs; a SyncVectorEnv's first sub-env), else None. An
    AsyncVectorEnv is not asked (a worker asked for a missing attribute shuts down): pass it explicitly."""
    first = getattr(env, "envs", None)
    dt = getattr((first[0] if first else env).unwrapped, "dt", None)
    return float(dt) if isinstance(dt, int | float) else None


def _machine_busy_s() -> float | None:
    """CPU time the whole machine spent busy: user + nice + system + irq + softirq of /proc/stat's ``cpu``."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            f = fh.readline().split()
        return sum(int(f[i]) for i in (1, 2, 3, 6, 7)) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _descendants() -> list[int]:
    """Child processes of this process and theirs (/proc/PID/task/TID/children)."""
    found, todo = [], [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as fh:
                    kids = [int(c) for c in fh.read().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def _threads(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def _process_cpu_s(pid: int) -> float:
    """utime + stime of a live process (/proc/PID/stat fields 14 and 15), s."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0
