"""The plant registry (hil.rt.plants): a toy third plant, a damped pendulum at the elbow with one actuator, is
registered here and nowhere else, and then is a plant like the others: ``[plant] type`` and its own key are
validated, an offline run steps it through the compiled tick (sub-steps, excitation, frame), and ``hil report``
plots it (no glenoid figure: it has no GH model)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from hil.config import load_service_config
from hil.recording.hilrec import read_run_recording
from hil.reports.run_report import make_report
from hil.rt.offline import run_offline
from hil.rt.plants import PlantType, plant_names, plant_type, register_plant, unregister_plant
from hil.rt.tick_kernel import tick_inputs, tick_outputs
from sim.config_schema import Key, Section
from sim.das3.config import ConfigError
from sim.das3.layout import DOF_NAMES
from sim.jit.kernel import entry, kernel
from sim.plants import FixedStepPlant

ELBOW = DOF_NAMES.index("ELx")
GRAVITY = 9.81
STATUS_OK, STATUS_BAD_INPUT = 0, 1


@kernel
def pendulum_steps(p, x, u_applied, u, loads, h, q, qd, n):
    """n semi-implicit Euler steps of th'' = -(g/l) sin th - c th' + k a + M/(m l^2), da/dt = (u - a)/tau
    (p = g/l, c, k, tau, m l^2); u clipped to [0, 1] into u_applied. (status, clipped, steps done)."""
    v = u[0]
    if not math.isfinite(v):
        return STATUS_BAD_INPUT, 0, 0
    u_applied[0] = min(1.0, max(0.0, v))
    for _ in range(n):
        x[2] += h * (u_applied[0] - x[2]) / p[3]
        x[1] += h * (-p[0] * math.sin(x[0]) - p[1] * x[1] + p[2] * x[2] + loads[0] / p[4])
        x[0] += h * x[1]
    q[ELBOW], qd[ELBOW] = x[0], x[1]
    return STATUS_OK, 1 if u_applied[0] != v else 0, n


@kernel
def pendulum_tick(arrays, stale, tick, time_s, overrun, warm):
    plant, n_steps, u, bits = tick_inputs(arrays, tick, warm)
    p, x, u0, loads, h, q, qd = plant
    status, n_clipped, n_done = pendulum_steps(p, x, u0, u, loads, h, q, qd, n_steps)
    return status, n_clipped, n_done, tick_outputs(arrays, tick, time_s, n_done == n_steps, bits, overrun, warm)


@entry
def pendulum_compute_tick(arrays, stale, tick, time_s, overrun, warm):
    return pendulum_tick(arrays, stale, tick, time_s, overrun, warm)


class PendulumModel:
    kind = "pendulum"
    has_glenohumeral = False
    load_names = ("elbow_moment",)
    muscle_names = ("flexor",)
    n_muscles, n_states = 1, 3
    dof_names = DOF_NAMES
    dof_ranges = np.tile([-math.pi, math.pi], (len(DOF_NAMES), 1))
    data_sha256 = "pendulum"

    def __init__(self, length_m: float) -> None:
        self.params = np.array([GRAVITY / length_m, 0.5, 40.0, 0.05, 1.0 * length_m ** 2])
        self.equilibrium_state = np.array([0.5, 0.0, 0.0])

    def voluntary_reach(self, patient) -> np.ndarray:
        return np.ones(self.n_muscles)


class PendulumOutputs:
    def __init__(self) -> None:
        self.q, self.qdot = np.zeros(len(DOF_NAMES)), np.zeros(len(DOF_NAMES))
        self.th_angles, self.hand_position = np.zeros(3), np.zeros(3)
        self.gh_force, self.st_contact_force = np.full(3, math.nan), np.full((2, 3), math.nan)
        self.gh_stability_cell = np.full(1, math.nan)
        self.gh_stability = math.nan


class PendulumPlant(FixedStepPlant):
    STATUS_OK, STATUS_BAD_INPUT = STATUS_OK, STATUS_BAD_INPUT

    def __init__(self, model: PendulumModel, step_s: float, initial_state=None) -> None:
        super().__init__(model, step_s, model.n_states, model.n_muscles)
        self.outputs = PendulumOutputs()
        self._work = None
        self._x[:] = model.equilibrium_state if initial_state is None else initial_state
        self.refresh_outputs()

    @property
    def kernel_args(self) -> tuple:
        out = self.outputs
        return self.model.params, self._x, self._u, self._loads, self.step_s, out.q, out.qdot

    def advance(self, u, stale):
        return pendulum_steps(*self.kernel_args[:2], self._u, u, self._loads, self.step_s, *self.kernel_args[5:], 1)

    def failure_message(self, status: int) -> str:
        return "diverged"

    def refresh_outputs(self) -> None:
        self.outputs.q[ELBOW], self.outputs.qdot[ELBOW] = self._x[0], self._x[1]


PENDULUM = PlantType(
    name="pendulum", doc="a damped pendulum at the elbow (tests)", model_class=PendulumModel,
    load_model=lambda cfg: PendulumModel(cfg.plant.options["length_m"]),
    make_plant=lambda model, cfg, step_s, initial: PendulumPlant(model, step_s, initial),
    tick=pendulum_compute_tick,
    options=Section("plant (pendulum)", "The test's pendulum.", (
        Key("length_m", "number", 0.3, "pendulum length", lo=0.05, hi=2.0),)))


@pytest.fixture
def pendulum():
    register_plant(PENDULUM)
    yield PENDULUM
    unregister_plant(PENDULUM.name)


def _config(tmp_path, plant: str = 'type = "pendulum"', safety: str = "") -> str:
    (tmp_path / "flex.csv").write_text("time,flexor\n0,0\n0.2,0\n0.3,1\n0.6,1\n0.7,0\n")
    path = tmp_path / "pendulum.toml"
    path.write_text(f"[loop]\nperiod_ms = 4.0\nsubsteps = 2\nsched_fifo = false\nmlock = false\n"
                    f"[plant]\n{plant}\n[stimulation]\nmode = \"direct\"\n[safety]\n{safety}\n"
                    "[metrics]\nenabled = false\n[recording]\nenabled = false\n"
                    "[[driver]]\ntype = \"loopback\"\ncontroller = \"playback\"\nfile = \"flex.csv\"\n"
                    "direct = true\nrate_hz = 50\n")
    return str(path)


def _python_pendulum(length_m: float, excitation, n_ticks: int, substeps: int, h: float) -> np.ndarray:
    """The elbow angle after each tick, the same equations stepped in Python with the recorded excitations (no
    load)."""
    p = PendulumModel(length_m).params
    th, om, a, out = 0.5, 0.0, 0.0, []
    for k in range(n_ticks):
        for _ in range(substeps):
            a += h * (excitation[k] - a) / p[3]
            om += h * (-p[0] * math.sin(th) - p[1] * om + p[2] * a)
            th += h * om
        out.append(th)
    return np.array(out)


def test_a_plant_registered_in_a_test_runs_offline_through_the_compiled_tick_and_is_reported(pendulum, tmp_path):
    cfg = load_service_config(_config(tmp_path, 'type = "pendulum"\nlength_m = 0.4'))
    assert cfg.plant.options == {"length_m": 0.4}
    rec = tmp_path / "run.hilrec"
    result = run_offline(cfg, 250, record_path=str(rec))
    assert result.stopped_by == "duration" and result.ticks == 250
    summary = make_report(str(rec), str(tmp_path / "report"))
    assert summary["ticks"] == 250 and "glenoid" not in summary["files"] and "joint_angles" in summary["files"]
    ticks = read_run_recording(str(rec)).read("ticks")
    u = ticks["u"][:, 0]
    assert u.max() == 1.0 and u[0] == 0.0                # the playback's excitation reached the plant
    expected = _python_pendulum(0.4, u, 250, 2, 0.002)
    np.testing.assert_allclose(ticks["frame"]["q"][:, ELBOW], expected, rtol=0, atol=1e-12)
    assert np.all(np.isnan(ticks["frame"]["gh_stability"]))


def test_the_config_takes_a_registered_plant_its_own_keys_and_its_capabilities(pendulum, tmp_path):
    assert plant_names()[-1] == "pendulum" and not plant_type("pendulum").has_glenohumeral
    with pytest.raises(ConfigError, match=r'plant\.length_m.*needs type = "pendulum"'):
        load_service_config(_config(tmp_path, 'type = "das3"\nlength_m = 0.4'))
    with pytest.raises(ConfigError, match=r"plant\.length_m.*2"):
        load_service_config(_config(tmp_path, 'type = "pendulum"\nlength_m = 5.0'))
    with pytest.raises(ConfigError, match="the pendulum plant has no glenohumeral model"):
        load_service_config(_config(tmp_path, safety='gh_action = "zero"'))


def test_an_unregistered_plant_type_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"plant\.type.*das3, mtg"):
        load_service_config(_config(tmp_path))


def test_a_plant_type_is_registered_once_under_its_model_kind(pendulum):
    with pytest.raises(ValueError, match="registered already"):
        register_plant(PENDULUM)
    with pytest.raises(ValueError, match="kind 'pendulum'"):
        register_plant(PlantType(name="other", doc="", model_class=PendulumModel, load_model=None,
                                 make_plant=None, tick=None))
