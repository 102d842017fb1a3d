"""The compiled tick of the DAS3 plant type (hil.rt.plants.compute_tick) against the same tick composed from its
documented pieces in Python: stimulation map, zero-order hold over the plant's sub-steps, the noise-free frame."""
import tomllib
from pathlib import Path

import numpy as np
import pytest
from helpers import loopback_driver

from drivers.controllers.plugin import ChannelCommand, Controller
from hil.rt.engine import TickEngine
from hil.rt.plants import compute_tick
from hil.rt.sensor import SensorModel, SensorModelConfig
from hil.rt.stimulation import StimulationModel, load_stimulation_config
from hil.rt.tick import TickBody
from hil.safety.table import SafetyConfig
from sim.das3.plant import Plant, PlantDivergedError

REPO = Path(__file__).resolve().parents[2]
H, SUBSTEPS = 0.002, 2
REASONS = ("unknown_channel", "unknown_muscle", "non_finite", "bad_frame")


class RampingChannels(Controller):
    """Channels 0 and 1 (biceps, triceps of the default map) with a rising pulse width; silent from
    ``silent_from`` on, so the watchdog zeroes the stimulation."""

    def __init__(self, silent_from: int) -> None:
        self.silent_from = silent_from

    def step(self, tick, time_s, frame):
        if tick >= self.silent_from:
            return None
        return [ChannelCommand(1, 100.0 + 10.0 * tick, 30.0, 40.0, 0), ChannelCommand(2, 80.0 + 5.0 * tick, 25.0, 30.0, 1)]


def stimulation_map(model) -> StimulationModel:
    table = tomllib.loads((REPO / "configs/stimulation-default.toml").read_text())["stimulation"]
    return StimulationModel(load_stimulation_config(table, model.muscle_names), model.muscle_names)


def engine_with(model, plant) -> TickEngine:
    return TickEngine(plant, stimulation_map(model), SafetyConfig(watchdog_timeout_s=0.02), SensorModel(
        SensorModelConfig()), H * SUBSTEPS, SUBSTEPS, REASONS)


def test_compiled_tick_equals_the_tick_composed_in_python(model):
    """Every tick: u is the stimulation map of the applied channels (zero while the watchdog is tripped),
    the plant state is that of SUBSTEPS Python-level steps holding u, and the frame reports it."""
    engine = engine_with(model, Plant(model, step_s=H))
    engine.warmup()
    reference, ref_map = Plant(model, step_s=H), stimulation_map(model)
    driver = loopback_driver(RampingChannels(silent_from=15), H * SUBSTEPS, channel_names=('c1', 'c2'))
    body, u_ref = TickBody(engine, [driver]), np.zeros(model.n_muscles)
    zeroed = 0
    for tick in range(30):
        frame = body.step(tick, tick).frame[0]
        ref_map.excitation_from_applied(engine.applied, u_ref)
        zeroed += not engine.applied.any()
        for _ in range(SUBSTEPS):
            reference.step(u_ref)
        assert engine.u.tobytes() == u_ref.tobytes(), tick
        assert engine.plant.x.tobytes() == reference.x.tobytes(), tick
        out = reference.outputs
        assert frame["q"].tobytes() == out.q.tobytes() and frame["qdot"].tobytes() == out.qdot.tobytes()
        assert frame["gh_stability"] == out.gh_stability and frame["gh_force"].tobytes() == out.gh_force.tobytes()
        assert frame["elbow_flexion"] == out.q[model.dof_names.index("ELx")]
        assert frame["tick"] == tick and frame["time"] == pytest.approx((tick + 1) * H * SUBSTEPS, rel=1e-15)
    assert engine.plant.steps == reference.steps == 30 * SUBSTEPS
    assert 0 < zeroed < 30 and engine.u.max() == 0.0 and u_ref.max() == 0.0 and engine.watchdog.tripped
    driver.shutdown()


def test_a_plant_failure_inside_the_tick_raises_and_keeps_the_last_good_state(model):
    """A step rejected inside the compiled tick (here by an impossible residual limit) raises like
    Plant.step: the state and the step count stay those of the last good step, and the plant refuses
    further ticks."""
    engine = engine_with(model, Plant(model, step_s=H, residual_limit=1e-30))
    x0 = engine.plant.x.copy()
    engine.begin(0)
    with pytest.raises(PlantDivergedError, match="step 1 "):
        engine.step()
    assert engine.plant.failed and engine.plant.steps == 0 and engine.plant.x.tobytes() == x0.tobytes()
    engine.begin(1)
    with pytest.raises(PlantDivergedError, match="diverged earlier"):
        engine.step()


def test_after_warmup_the_tick_calls_its_compiled_overload_directly_with_the_same_results(model):
    """Warmup binds the compiled overload (no numba dispatch per tick): frames, excitations and plant
    states equal, tick by tick, those of an engine whose tick goes through the dispatcher."""
    direct, dispatched = (engine_with(model, Plant(model, step_s=H)) for _ in range(2))
    direct.warmup()
    assert direct._compute_tick is not compute_tick and dispatched._compute_tick is compute_tick
    drivers = [loopback_driver(RampingChannels(silent_from=15), H * SUBSTEPS, channel_names=('c1', 'c2'))
               for _ in range(2)]
    bodies = [TickBody(engine, [driver]) for engine, driver in zip((direct, dispatched), drivers)]
    for tick in range(30):
        frames = [body.step(tick, tick).frame.tobytes() for body in bodies]
        assert frames[0] == frames[1], tick
        assert direct.u.tobytes() == dispatched.u.tobytes() and direct.plant.x.tobytes() == dispatched.plant.x.tobytes()
    assert direct.plant.steps == dispatched.plant.steps == 30 * SUBSTEPS
    for driver in drivers:
        driver.shutdown()


def test_warmup_leaves_the_safety_state_its_counters_and_the_frame_status_alone(model):
    """The warm-up runs the compiled tick with zero stimulation and none of the safety rules: the watchdog's
    and the alarms' state cells, their counters and the frame's status are what they were before."""
    engine = TickEngine(Plant(model, step_s=H), stimulation_map(model), SafetyConfig(
        watchdog_timeout_s=0.02, gh_action="zero", rom_action="zero"), SensorModel(SensorModelConfig()),
        H * SUBSTEPS, SUBSTEPS, REASONS)
    engine.watchdog.cells[:] = (-1, 0, 0)    # an update would trip it (never fed) and count nothing
    engine.gh.cells[:] = (0, 3)              # a classified stable frame would run the hold down to 2
    engine.rom.cells[:] = (0, 3)
    engine.sensor.status_view[0] = 12345
    cells = [engine.watchdog.cells.copy(), engine.gh.cells.copy(), engine.rom.cells.copy()]
    counts = engine.counters.values.copy()
    engine.warmup()
    after = [engine.watchdog.cells, engine.gh.cells, engine.rom.cells]
    assert all(a.tolist() == b.tolist() for a, b in zip(after, cells))
    assert engine.counters.values.tobytes() == counts.tobytes() and engine.sensor.status_view[0] == 12345
    engine.begin(0)
    engine.step()                             # the first real tick applies the rules
    assert engine.watchdog.tripped and engine.watchdog.just_tripped and engine.gh.cells[1] == 2
