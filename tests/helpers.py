"""Helpers shared by the test modules (``from helpers import ...``; ``tests/`` is on ``sys.path`` through
``pythonpath`` in pyproject.toml): the repository's paths, the `hil` command in a subprocess, free ports,
port files, sweep files, analysis postures, sensor-stream readers, loopback drivers and the process tree."""
from __future__ import annotations

import json
import math
import os
import resource
import socket
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from pathlib import Path

import numpy as np
import serial

from drivers.controllers.loopback import LoopbackDriver
from drivers.controllers.plugin import ControllerSettings
from drivers.stimulators.sensor_stream import SensorStreamReader
from hil.service.build import build_engine
from sim.analysis.static_opt import Posture
from sim.das3.model import DOF_NAMES, N_MUS

ROOT = Path(__file__).resolve().parents[1]
"""The repository (the working directory of every `hil` subprocess)."""
CONFIGS = ROOT / "configs"
DATA = ROOT / "tests" / "data"
GENERIC_CPU = {"NUMBA_CPU_NAME": "generic", "NUMBA_CPU_FEATURES": "",
               "NUMBA_CACHE_DIR": str(ROOT / ".numba-cache" / "generic-cpu")}
"""numba compiling for the generic x86-64 target, into a cache of its own (never mixed with the host's kernels)."""

PLANT_TRAJECTORY = """
import sys
import numpy as np
from sim.das3.model import load_model
from sim.das3.plant import Plant

model = load_model()
plant = Plant(model, 0.004)
rng = np.random.default_rng(11)
rows = []
for k in range(120):
    if k % 15 == 0:         # excitation jumps: the activation scheme's fibre correction runs too
        u = rng.uniform(0.0, 0.4, model.n_muscles)
    plant.step(u)
    out = plant.outputs
    rows.append(np.concatenate([plant.x, out.gh_force, out.th_angles, out.hand_position,
                                out.st_contact_force.ravel(), [out.gh_stability]]))
np.save(sys.argv[1], np.array(rows))
"""
"""A script stepping the DAS3 plant 120 steps under excitation jumps; saves its states and outputs to argv[1]."""


def plant_trajectory(path: Path, generic: bool = False) -> subprocess.Popen:
    """:data:`PLANT_TRAJECTORY` in a child process writing ``path``, compiled for this host or (``generic``) for
    the generic x86-64 target (:data:`GENERIC_CPU`)."""
    env = {**os.environ, **(GENERIC_CPU if generic else {})}
    return subprocess.Popen([sys.executable, "-c", PLANT_TRAJECTORY, str(path)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def arm_posture(model, elevation_deg: float, plane_deg: float = 60.0) -> Posture:
    """A static-optimisation posture: plane of elevation and elevation (deg), axial rotation 0, and the elbow and
    forearm of the model's published equilibrium."""
    eq = model.equilibrium_state
    return Posture(math.radians(plane_deg), math.radians(elevation_deg), 0.0, float(eq[9]), float(eq[10]))


def hil(*args, timeout: float = 300.0, **kw) -> subprocess.CompletedProcess:
    """``python -m hil args`` run to its end in the repository, its output captured as text."""
    kw.setdefault("cwd", ROOT)
    return subprocess.run([sys.executable, "-m", "hil", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, **kw)


def hil_in_process(*args) -> subprocess.CompletedProcess:
    """``hil ARGS`` run in this process on the same command tree (typer's CliRunner on ``hil.cli.app``), its
    output captured as :func:`hil`'s: for input checks that end before anything runs, without the start-up of a
    Python process per case. An exception escaping the command is written to stderr as the process would print
    it (a traceback), so the tests that say "one line, no traceback" see it. Not for inputs that could hang, fill
    memory or end the process when a check breaks: those run in :func:`hil` / :func:`hil_process`."""
    from typer.testing import CliRunner

    from hil.cli import app
    argv = [str(a) for a in args]
    result = CliRunner().invoke(app, argv, prog_name="hil")
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(result.exception))
    return subprocess.CompletedProcess(["hil", *argv], result.exit_code, result.stdout, stderr)


def start_hil(*args, **kw) -> subprocess.Popen:
    """``python -m hil args`` started in the repository, stdout and stderr piped as text."""
    kw.setdefault("cwd", ROOT)
    return subprocess.Popen([sys.executable, "-m", "hil", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)


def _bounded_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def hil_process(*args, cwd=None) -> tuple[int, str]:
    """``python -m hil ARGS`` in a process with at most 3 GiB of address space, 120 s at most: (exit code,
    stderr). A command that reads a huge or endless file fails (MemoryError) instead of filling the machine."""
    done = subprocess.run([sys.executable, "-m", "hil", *map(str, args)], capture_output=True, text=True,
                          timeout=120, preexec_fn=_bounded_address_space, cwd=cwd)
    return done.returncode, done.stderr


def assert_one_error_line(code: int, stderr: str, *words: str) -> None:
    """Exit 2, one non-empty stderr line, 'Error:' and every word in it, no traceback."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == 2, (code, stderr[-2000:])
    assert len(lines) == 1 and lines[0].startswith("Error:") and "Traceback" not in stderr, stderr[-2000:]
    for word in words:
        assert word in lines[0], lines[0]


def mount_small_tmpfs(path: Path, size: str, *options: str) -> bool:
    """Make the directory ``path`` and mount a tmpfs of ``size`` (``"160k"``) with ``options`` (``"ro"``) on it;
    whether it could be mounted (root, or a mount namespace). Unmount it with ``umount`` after the test."""
    path.mkdir()
    opts = ",".join((f"size={size}",) + options)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)], capture_output=True).returncode == 0


def file_size_limit(limit: int):
    """A ``preexec_fn`` limiting the files a process writes to ``limit`` bytes: where no small tmpfs can be
    mounted, a write past it fails as on a full disk (Python ignores SIGXFSZ, so the write raises EFBIG)."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def rms(v) -> float:
    """Root mean square: sqrt(mean(v²))."""
    return float(np.sqrt(np.mean(np.square(v))))


def write_sweep(tmp_path: Path, duration_s: float, body: str, base: str = "elbow-hold.toml") -> Path:
    """``tmp_path/sweep.toml``: a sweep of the shipped ``configs/<base>`` for ``duration_s`` with ``body``
    (its ``[grid]`` / ``[random]`` tables)."""
    path = tmp_path / "sweep.toml"
    path.write_text(f'base = "{CONFIGS / base}"\nduration_s = {duration_s}\n' + textwrap.dedent(body))
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for exporters and links in tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics_port(ports: dict) -> int:
    """The metrics exporter's port in the JSON of `hil run --port-file`."""
    return int(ports["metrics"]["exporter"].rsplit(":", 1)[1])


def wait_for_port_file(path: Path, proc: subprocess.Popen, timeout: float = 300.0) -> dict:
    """The ports a `hil run --port-file` announced, once the file exists (fails if the run exits first)."""
    t_end = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"hil run exited early: {proc.communicate()[1]}")
        if time.monotonic() > t_end:
            raise AssertionError("no port file")
        time.sleep(0.05)
    return json.loads(path.read_text())


class SensorFrames:
    """Collects the (echo, frame) packets of a sensor-stream tty in a thread while ``proc`` runs."""

    def __init__(self, port: str, proc: subprocess.Popen) -> None:
        self.serial, self.proc = serial.Serial(port, timeout=0.1), proc
        self.reader, self.frames = SensorStreamReader(), []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while self.proc.poll() is None:
            try:
                self.frames.extend(self.reader.feed(self.serial.read(4096)))
            except serial.SerialException:      # the service closed the pty at the end of the run
                break

    def close(self) -> None:
        self.thread.join(2)
        self.serial.close()


def loopback_driver(controller, period_s: float, muscle_names=(), channel_names=(), group_names=(), rate_hz=None,
                    params=None):
    """A LoopbackDriver running ``controller`` (reset here with ``params``) every tick, or at ``rate_hz``."""
    rate = 1.0 / period_s if rate_hz is None else rate_hz
    settings = ControllerSettings(period_s=period_s, rate_hz=rate,
                                  call_period_s=max(1, round(1.0 / (rate * period_s))) * period_s,
                                  channel_names=tuple(channel_names), muscle_names=tuple(muscle_names),
                                  group_names=tuple(group_names), dof_names=DOF_NAMES, params=params or {})
    controller.reset(settings)
    return LoopbackDriver(controller, settings)


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, name) of every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            out[int(entry.name)] = (int(stat[stat.rindex(")") + 2:].split()[1]), name)
    return out


def shared_memory_of(pids) -> set[str]:
    """The /dev/shm segments these processes have mapped."""
    names = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        names |= {line.split("/dev/shm/")[1] for line in maps.splitlines() if "/dev/shm/psm_" in line}
    return names


def descendants(pid: int) -> dict[int, str]:
    """pid -> name of every process below ``pid``."""
    table, found, todo = processes(), {}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, name) in table.items():
            if ppid == parent and child not in found:
                found[child] = name
                todo.append(child)
    return found


def closed_loop_elbow(cfg, ticks: int):
    """(elbow flexion in deg at each tick, the engine) of ``ticks`` ticks of a service config's in-process loop
    (its engine and drivers, offline, as hil run --offline steps them)."""
    _, engine, drivers = build_engine(cfg)
    elbow = np.zeros(ticks)
    for tick in range(ticks):
        engine.begin(tick)
        for d in drivers:
            d.fetch(tick, tick, engine)
        result = engine.step()
        for d in drivers:
            d.publish(result.frame)
        elbow[tick] = math.degrees(float(result.frame["elbow_flexion"][0]))
    for d in drivers:
        d.shutdown()
    return elbow, engine


def angles_under_elbow_moment(plant, moment_nm: float, steps: int) -> np.ndarray:
    """(steps, 11) joint angles of a plant stepped ``steps`` times, unstimulated, under a constant elbow moment
    (N m, positive flexing)."""
    plant.set_loads(moments=(0.0, 0.0, 0.0, moment_nm, 0.0))
    angles = np.zeros((steps, len(DOF_NAMES)))
    for k in range(steps):
        plant.step(np.zeros(N_MUS))
        angles[k] = plant.x[:len(DOF_NAMES)]
    return angles
