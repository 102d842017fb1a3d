"""Compile the kernels the tests use, once, on both cores. The suite's session start runs this before xdist
starts its workers (``tests/conftest.py``); ``.ci/run`` runs it first (``PYTHONPATH=tests python3 -m warm_up``
in the repository), while the MyoSuite peer's venv is made and before its ``hil serve`` starts.

Each chain is a list of processes run one after another; the chains run side by side. Two processes may
compile one kernel at the same time (numba's cache saves hold a lock, ``sim.jit.cache_lock``): the chains are
ordered so that they rarely do, which would only repeat the work. With a warm cache every step loads its
kernels in seconds."""
from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from helpers import CONFIGS, ROOT, plant_trajectory, start_hil

BATCH = ("import gymnasium as gym, hil.gym\n"
         "for threads in {threads!r}:\n"
         "    gym.make_vec('fes_hil/ElbowHold-v0', num_envs=1, vectorization_mode='vector_entry_point', "
         "plant={plant!r}, threads=threads)\n")
"""Builds a batch of one plant on each number of threads: compiles its batched tick for the Gymnasium environments,
the one-thread tick and, for two threads, the threaded one (hil.rt.plants)."""
TIMEOUT_S = 1800.0
"""Longest a step may take (a cold cache on a slow machine takes minutes)."""


def _offline_run(name: str, work: Path) -> tuple[str, Callable[[], subprocess.Popen]]:
    return f"configs/{name}", lambda: start_hil("run", "--offline", "--config", CONFIGS / name, "--duration", "0.05",
                                                "--record", work / f"{name}.hilrec")


def _batch(plant: str, threads: tuple[int, ...]) -> Callable[[], subprocess.Popen]:
    return lambda: subprocess.Popen([sys.executable, "-c", BATCH.format(plant=plant, threads=threads)], cwd=ROOT,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def chains(work: Path) -> tuple[list, list]:
    """(label, a function starting the step's process) per step, in two chains of about equal length on a cold
    cache. One: the plant for the generic x86-64 CPU (its own cache, ``helpers.GENERIC_CPU``, for
    ``tests/sim/test_cpu_independence.py``), the MTG arm's run, then the MTG arm's Gymnasium batch. The other:
    the DAS3 run (the plant and the tick), the lab sensors' run, the plant stepped from Python (``Plant.step``'s
    entry, which a run does not use), then the DAS3 batch (also on two threads, as ``tests/hil/test_gym.py`` runs it)."""
    generic = [("the plant for the generic CPU", lambda: plant_trajectory(work / "generic.npy", generic=True)),
               _offline_run("elbow-hold-mtg.toml", work),
               ("the MTG arm's Gymnasium batch", _batch("mtg", (1,)))]
    host = [_offline_run("elbow-hold.toml", work), _offline_run("elbow-hold-imu.toml", work),
            ("the plant stepped from Python", lambda: plant_trajectory(work / "host.npy")),
            ("the DAS3 Gymnasium batch", _batch("das3", (1, 2)))]
    return generic, host


def step_outcome(child: subprocess.Popen) -> str:
    """``ready after N s`` when the process ends well, else why not: its last line on stderr, or a timeout
    (TIMEOUT_S, then it is killed)."""
    t0 = time.monotonic()
    try:
        _, err = child.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return f"warm-up timed out after {time.monotonic() - t0:.0f} s"
    last = (err.strip().splitlines() or [""])[-1]
    state = "ready" if child.returncode == 0 else f"warm-up failed ({last})"
    return f"{state} after {time.monotonic() - t0:.0f} s"


def warm(say) -> None:
    """Run :func:`chains` side by side; ``say`` gets one line per step. A failure is reported and left to the
    tests that need the plant."""
    lock = threading.Lock()

    def run(chain) -> None:
        for label, start in chain:
            outcome = step_outcome(start())
            with lock:
                say(f"numba kernels of {label}: {outcome}")

    with tempfile.TemporaryDirectory() as work:
        threads = [threading.Thread(target=run, args=(chain,)) for chain in chains(Path(work))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


if __name__ == "__main__":
    warm(lambda line: print(f"warm-up: {line}", flush=True))
