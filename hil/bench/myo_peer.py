"""The MyoSuite peer of ``hil bench gym``: a MuJoCo muscle-arm environment measured with the same functions
(:mod:`hil.bench.throughput`) as ours, in the same run.

MyoSuite 3.0.0 requires ``gymnasium<1.3`` (this project runs Gymnasium 1.4) and brings many large
dependencies (onnxruntime, pandas, scikit-learn, imageio-ffmpeg, ...) that its arm and elbow environments
do not import, so it lives in its own virtual environment, ``runs/.venv-myosuite``, made on demand by
:func:`setup_venv`: ``python3 -m venv``, then :data:`PINS` from the package index with ``--no-deps``. Its
models come in the ``myo-sim`` wheel; nothing is downloaded at import or ``make``. The measurement runs
there in a subprocess that loads only :mod:`hil.bench.platform`, :mod:`hil.bench.throughput` and this module
(package stubs instead of ``hil/__init__``, which imports the plant), and prints one JSON object a line:
``{"model": ...}`` per environment, ``{"row": ...}`` per measurement, or ``{"error": ...}``. No renderer is
created (no ``render_mode``), so MuJoCo needs no GL.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from hil.bench.throughput import Throughput, measure

ELBOW_ENV = "myoElbowPose1D6MRandom-v0"
"""MyoSuite's elbow pose task: 1 DOF, 6 muscles, random target angle in 0..2.27 rad, 100 steps an episode."""
REACH_ENV = "myoArmReachRandom-v0"
"""MyoSuite's arm reach task: shoulder girdle, shoulder, elbow, forearm and wrist; the forearm tip to a target."""
PINS = ("myosuite==3.0.0", "myo-sim==0.2.3", "mujoco==4.0.0", "mujoco-core==4.0.0", "mujoco-studio==4.0.0",
        "gymnasium==1.2.3", "numpy==2.4.6", "cloudpickle==3.1.3", "farama-notifications==0.0.6",
        "typing-extensions==4.16.0", "termcolor==3.3.0", "colorednoise==2.2.0", "glfw==2.11.0", "pyopengl==3.1.10",
        "absl-py==2.5.1")
"""What the arm and elbow environments import, installed without their other dependencies (``--no-deps``):
MyoSuite 3.0.0 with the newest MuJoCo and Gymnasium it accepts and MuJoCo's own requirements."""
VENV = Path("runs") / ".venv-myosuite"
ROOT = Path(__file__).resolve().parents[2]
SETUP_HINT = ("make it with `hil bench peer-setup` or `hil bench gym --peer-setup` (a virtual environment "
              "runs/.venv-myosuite from the package index)")

_BOOTSTRAP = """
import json, sys, types
spec = json.loads(sys.argv[1])
for name, path in (("hil", "hil"), ("hil.bench", "hil/bench")):
    module = types.ModuleType(name)
    module.__path__ = [spec["root"] + "/" + path]
    sys.modules[name] = module
try:
    from hil.bench.myo_peer import child_main
except ImportError as exc:
    print(json.dumps({"error": f"the MyoSuite peer's environment lacks {exc.name} ({sys.executable}); "
                               + spec["hint"]}))
else:
    child_main(spec)
"""


class PeerUnavailable(Exception):
    """The MyoSuite peer cannot run; the message is one line saying why and what to do."""


@dataclass(frozen=True)
class MyoModel:
    """What a MyoSuite environment simulates, for the comparison."""

    env_id: str
    muscles: int              # actuators (all muscles in these models)
    dofs: int                 # degrees of freedom (nv)
    joints: list[str]
    equality_constraints: int  # couplings (e.g. scapula and clavicle rhythm), MuJoCo equalities
    timestep_s: float         # MuJoCo integrator step
    frame_skip: int           # integrator steps per env step
    control_period_s: float   # timestep x frame_skip
    episode_steps: int | None
    observation_size: int
    versions: str             # myosuite, mujoco, gymnasium

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PeerResult:
    models: list[MyoModel]
    rows: list[Throughput]


def venv_python(venv: Path = VENV) -> Path:
    return venv / "bin" / "python"


def setup_venv(venv: Path = VENV, pins: tuple[str, ...] = PINS) -> str:
    """Make ``venv`` (``python3 -m venv``) and install ``pins`` into it with pip; the last line pip printed.
    Raises :class:`PeerUnavailable` with pip's last error line if it fails."""
    steps = ([sys.executable, "-m", "venv", str(venv)],
             [str(venv_python(venv)), "-m", "pip", "install", "--quiet", "--no-deps", *pins])
    for cmd in steps:
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            raise PeerUnavailable(f"setting up the MyoSuite peer failed ({' '.join(cmd[-3:])}): "
                                  f"{_last_line(out.stderr or out.stdout)}")
    return f"MyoSuite peer ready in {venv} ({pins[0]} and {len(pins) - 1} more pinned packages)"


def measure_peer(counts: tuple[int, ...] = (1, 8, 64), env_ids: tuple[str, ...] = (ELBOW_ENV,), steps: int = 4000,
                 warmup: int = 200, seed: int = 0, modes: tuple[str, ...] = ("single", "sync"),
                 venv: Path = VENV, timeout_s: float = 1800.0) -> PeerResult:
    """Each of ``env_ids`` measured in the peer's environment: ``single`` (one Env; counts ignored),
    ``sync`` (gymnasium's SyncVectorEnv of ``n`` of them for each ``n`` of ``counts``) and ``async``
    (AsyncVectorEnv, one worker process per env). Raises :class:`PeerUnavailable` (one line) where the
    peer's environment is missing or the measurement fails."""
    python = venv_python(venv)
    if not python.exists():
        raise PeerUnavailable(f"MyoSuite peer not installed: {python} does not exist; {SETUP_HINT}")
    spec = {"root": str(ROOT), "hint": SETUP_HINT, "counts": list(counts), "env_ids": list(env_ids),
            "steps": steps, "warmup": warmup, "seed": seed, "modes": list(modes)}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    try:
        out = subprocess.run([str(python.absolute()), "-c", _BOOTSTRAP, json.dumps(spec)], capture_output=True,
                             text=True, timeout=timeout_s, env=env, cwd=str(venv.absolute()))  # MUJOCO_LOG.TXT there
    except subprocess.TimeoutExpired:
        raise PeerUnavailable(f"the MyoSuite peer did not finish within {timeout_s:g} s") from None
    return parse_output(out.stdout, out.stderr, out.returncode)


def parse_output(stdout: str, stderr: str, returncode: int) -> PeerResult:
    """The child's JSON lines as models and rows; :class:`PeerUnavailable` for an ``{"error"}`` line, a
    non-zero exit or no rows (message: the error, else the child's last stderr line)."""
    models, rows = [], []
    for line in stdout.splitlines():
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        if "error" in doc:
            raise PeerUnavailable(doc["error"])
        if "model" in doc:
            models.append(MyoModel(**doc["model"]))
        elif "row" in doc:
            rows.append(Throughput.from_dict(doc["row"]))
    if returncode != 0 or not rows:
        raise PeerUnavailable(f"the MyoSuite peer failed (exit {returncode}): {_last_line(stderr)}")
    return PeerResult(models, rows)


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def child_main(spec: dict) -> None:
    """In the peer's environment: measure as ``spec`` says and print JSON lines (see the module docstring)."""
    try:
        import gymnasium as gym
        import myosuite  # noqa: F401  (registers the myo* environments)
    except ImportError as exc:
        _emit({"error": f"MyoSuite does not import in the peer's environment ({exc}); {SETUP_HINT}"})
        return
    import warnings
    warnings.filterwarnings("ignore")
    for env_id in spec["env_ids"]:
        if env_id not in gym.registry:
            _emit({"error": f"MyoSuite {myosuite.__version__} has no environment {env_id}"})
            return
        model = describe(gym.make(env_id))
        _emit({"model": model.as_dict()})
        for mode in spec["modes"]:
            for n in ([1] if mode == "single" else spec["counts"]):
                row = _measure_one(gym, env_id, mode, n, spec, model.control_period_s)
                _emit({"row": row.as_dict()})


def _measure_one(gym, env_id: str, mode: str, n: int, spec: dict, period: float) -> Throughput:
    if mode == "single":
        def make():
            return gym.make(env_id)
    else:
        def make():
            fns = [lambda: gym.make(env_id)] * n
            return gym.vector.SyncVectorEnv(fns) if mode == "sync" else gym.vector.AsyncVectorEnv(fns)
    t0 = time.perf_counter()
    env = make()
    built = time.perf_counter() - t0
    try:
        return measure(env, spec["steps"], spec["warmup"], spec["seed"],
                       f"MyoSuite {env_id} {mode} (built in {built:.1f} s)", period)
    finally:
        env.close()


def describe(env) -> MyoModel:
    """Size and timing of a MyoSuite environment's MuJoCo model."""
    import gymnasium
    import mujoco
    import myosuite
    u = env.unwrapped
    m = u.model
    return MyoModel(env_id=env.spec.id, muscles=int(m.nu), dofs=int(m.nv),
                    joints=[mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, i) for i in range(m.njnt)],
                    equality_constraints=int(m.neq), timestep_s=float(m.opt.timestep), frame_skip=int(u.frame_skip),
                    control_period_s=float(m.opt.timestep) * int(u.frame_skip),
                    episode_steps=env.spec.max_episode_steps, observation_size=int(env.observation_space.shape[0]),
                    versions=f"myosuite {myosuite.__version__}, mujoco {mujoco.__version__}, "
                             f"gymnasium {gymnasium.__version__}")


def _emit(doc: dict) -> None:
    print(json.dumps(doc), flush=True)
