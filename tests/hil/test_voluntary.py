"""The patient's own movement (issue 37, item 6): a driver with role = "voluntary" drives the patient's voluntary
muscle groups apart from the stimulation (hil.rt.voluntary): the arm moves, safety leaves it applied, other groups
are refused, the record keeps it apart, and a run with it records and replays bit for bit."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers import hil, hil_in_process

from drivers.controllers.plugin import ChannelCommand, Controller, ExcitationCommand
from drivers.core.contract import KIND_CHANNEL, KIND_VOLUNTARY, REJECT_REASONS
from hil.config import load_service_config
from hil.recording.hilrec import RecordingReader
from hil.recording.replay import replay_recording
from hil.rt.offline import run_offline
from hil.rt.tick import TickBody
from hil.service.build import build_engine
from sim.das3.config import ConfigError
from sim.das3.model import DOF_NAMES

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "configs" / "c5-shoulder-command.toml"
SHRUG = REPO / "examples" / "patients" / "shoulder_shrug.py"
SCZ, ELX = DOF_NAMES.index("SCz"), DOF_NAMES.index("ELx")
NOT_VOLUNTARY = REJECT_REASONS.index("not_voluntary") + 1


class BicepsThenSilent(Controller):
    """Stimulates the biceps channel (4) until ``silent_from_tick``, then falls silent (the watchdog trips)."""
    max_commands = 1

    def reset(self, settings):
        super().reset(settings)
        self.silent_from = int(settings.params.get("silent_from_tick", 100))

    def step(self, tick, time_s, frame):
        return [ChannelCommand(4, 300.0, 40.0, 40.0)] if tick < self.silent_from else None


class ShrugAndStimulate(Controller):
    """A voluntary source that also sends a channel command (refused) and drives bicb (overlapping the biceps
    channel) besides the shrug."""
    max_commands = 4

    def step(self, tick, time_s, frame):
        return [ExcitationCommand("trapclav", 0.4), ExcitationCommand("levscap", 0.4), ExcitationCommand("bicb", 0.1),
                ChannelCommand(4, 300.0, 40.0, 40.0)]


def voluntary_driver(groups='["trapclav", "levscap"]', peak=0.4, controller=f"{SHRUG}:ShoulderShrug") -> str:
    """A [[driver]] table: the example shrug held at ``peak`` from the start (no rest, no rise, no fall)."""
    extra = f"groups = {groups}\npeak = {peak}\nrest_s = 0\nrise_s = 0\nhold_s = 1000\nfall_s = 0\n" \
        if controller.endswith("ShoulderShrug") else ""
    return f'[[driver]]\ntype = "loopback"\nrole = "voluntary"\ncontroller = "{controller}"\n{extra}'


def write_config(tmp_path, drivers: str, patient: str = 'preset = "c5-tetraplegia"', name: str = "vol.toml") -> Path:
    path = tmp_path / name
    path.write_text(f'include = ["{REPO / "configs" / "loopback.toml"}", "{REPO / "configs" / "stimulation-default.toml"}"]\n'
                    f"[patient]\n{patient}\n[metrics]\nenabled = false\n[recording]\nenabled = false\n"
                    f"[safety]\nwatchdog_timeout_ms = 100\n{drivers}")
    return path


def run(path: Path, ticks: int, log: list | None = None):
    """(model, engine, the tick records) of ``ticks`` ticks of the config at ``path``, in process; each tick's
    command-log entries appended to ``log``."""
    model, engine, drivers = build_engine(load_service_config(path))
    body, records = TickBody(engine, drivers), []
    try:
        engine.warmup()
        for tick in range(ticks):
            body.step(tick, tick)
            body.emit()
            records.append(engine.record.copy())
            if log is not None:
                log.append(engine.log[:engine.n_log].copy())
    finally:
        for d in drivers:
            d.shutdown()
    return model, engine, np.concatenate(records)


def test_the_voluntary_drive_elevates_the_shoulder_with_no_stimulation(tmp_path):
    """A C5 patient shrugs (upper trapezius, levator scapulae at 0.4) and nothing is stimulated: the clavicle
    elevates by degrees, the record's u stays zero and u_voluntary holds the drive on those groups only."""
    model, engine, rec = run(write_config(tmp_path, voluntary_driver()), 500)
    names = np.array([n.rstrip("0123456789") for n in model.muscle_names])
    shrug = np.isin(names, ["trapclav", "levscap"])
    elevation = np.degrees(rec["frame"]["q"][:, SCZ] - rec["frame"]["q"][0, SCZ])
    assert elevation[-1] > 5.0, elevation[-1]
    assert not rec["u"].any() and not rec["applied"].any()
    assert np.all(rec["u_voluntary"][:, shrug] == 0.4) and not rec["u_voluntary"][:, ~shrug].any()
    assert engine.rejected == {}


def test_safety_zero_stops_the_stimulation_and_leaves_the_voluntary_drive(tmp_path):
    """The controller falls silent: its watchdog zeroes the stimulation. The patient's own drive, which is no sign
    of the controller's life, stays applied and keeps the shoulder elevated."""
    controller = f'[[driver]]\ntype = "loopback"\ncontroller = "{__file__}:BicepsThenSilent"\nsilent_from_tick = 100\n'
    _, engine, rec = run(write_config(tmp_path, controller + voluntary_driver()), 600)
    _, _, alone = run(write_config(tmp_path, controller, name="alone.toml"), 600)
    assert engine.watchdog.tripped and rec["applied"][:100, 3, 1].min() == 40.0
    zeroed = (rec["frame"]["status"] & 1) != 0
    assert zeroed[200:].all() and not rec["u"][200:].any()
    assert np.all(rec["u_voluntary"][200:].max(axis=1) == 0.4)
    lift = np.degrees(rec["frame"]["q"][-1, SCZ] - alone["frame"]["q"][-1, SCZ])
    assert lift > 5.0, lift


def test_a_watchdog_is_not_fed_by_the_patient(tmp_path):
    """Only a voluntary source: it sends every call, yet the controller watchdog trips."""
    _, engine, rec = run(write_config(tmp_path, voluntary_driver()), 100)
    assert engine.watchdog.tripped and (rec["frame"]["status"][-1] & 1)


def test_commands_for_groups_the_patient_does_not_control_are_rejected_and_counted(tmp_path):
    """C5: the triceps are paralysed; a denervated group (patient file) too: rejected as not_voluntary, once per
    group command, logged (KIND_VOLUNTARY, index -1 - group), never applied; a channel command from the patient is
    rejected as wrong_mode."""
    patient = 'preset = "c5-tetraplegia"\n[patient.groups.levscap]\nstate = "denervated"'
    drivers = voluntary_driver(groups='["trapclav", "triclong", "levscap"]')
    entries: list = []
    model, engine, rec = run(write_config(tmp_path, drivers, patient), 20, entries)
    groups = list(engine.groups)
    assert engine.rejected == {(0, "not_voluntary"): 8}      # 2 groups, 4 calls (50 Hz)
    log = np.concatenate(entries)
    refused = log[log["status"] == NOT_VOLUNTARY]
    assert sorted(set(refused["index"])) == sorted({-1 - groups.index("triclong"), -1 - groups.index("levscap")})
    assert np.all(refused["kind"] == KIND_VOLUNTARY)
    names = np.array([n.rstrip("0123456789") for n in model.muscle_names])
    assert not rec["u_voluntary"][:, np.isin(names, ["triclong", "levscap"])].any()
    assert np.all(rec["u_voluntary"][:, names == "trapclav"] == 0.4)
    element = list(model.muscle_names).index("triclong1")     # an element command, as a link driver sends it
    assert not engine.excitation(0, 0, element, 0.5) and engine.voluntary_drive.values[element] == 0.0
    assert engine.rejected == {(0, "not_voluntary"): 9}

    entries = []
    _, engine, _ = run(write_config(tmp_path, voluntary_driver(controller=f"{__file__}:ShrugAndStimulate"),
                                    name="channel.toml"), 5, entries)
    log = np.concatenate(entries)
    assert engine.rejected == {(0, "wrong_mode"): 1}
    assert log[log["kind"] == KIND_CHANNEL]["status"].tolist() == [REJECT_REASONS.index("wrong_mode") + 1]


def test_the_record_keeps_stimulation_and_voluntary_drive_apart_and_the_plant_takes_their_maximum(tmp_path):
    """bicb is both stimulated (biceps channel) and driven by the patient: the record's u is the stimulation map
    alone, u_voluntary the patient's, and the plant's excitation max(u, u_voluntary) per element."""
    controller = f'[[driver]]\ntype = "loopback"\ncontroller = "{__file__}:BicepsThenSilent"\nsilent_from_tick = 1000\n'
    model, engine, rec = run(write_config(tmp_path, controller + voluntary_driver(
        controller=f"{__file__}:ShrugAndStimulate")), 50)
    names = np.array([n.rstrip("0123456789") for n in model.muscle_names])
    u, vol = rec["u"][-1], rec["u_voluntary"][-1]
    assert not u[np.isin(names, ["trapclav", "levscap"])].any() and u[names == "bicb"].min() > 0.1
    assert np.all(vol[names == "bicb"] == 0.1) and not vol[names == "bicl"].any()
    assert np.array_equal(engine.plant.excitation, np.maximum(u, vol))


class FlexAndExtendElbow(Controller):
    """A voluntary source on the MTG arm: drives its elbow flexor and extensor MTGs at 0.8."""
    max_commands = 2

    def step(self, tick, time_s, frame):
        return [ExcitationCommand("elbow_flexor", 0.8), ExcitationCommand("elbow_extensor", 0.8)]


def test_on_the_mtg_arm_the_patients_drive_reaches_each_actuators_voluntary_share(tmp_path):
    """C5: the paralysed triceps leave the elbow extensor MTG no voluntary share (its commands refused); the
    elbow flexor takes the drive times its reach (sim.mtg.patient), no stimulation besides."""
    path = tmp_path / "mtg.toml"
    path.write_text(f'include = ["{REPO / "configs" / "loopback.toml"}", "{REPO / "configs" / "stimulation-mtg.toml"}"]\n'
                    '[plant]\ntype = "mtg"\n[patient]\npreset = "c5-tetraplegia"\n[metrics]\nenabled = false\n'
                    '[recording]\nenabled = false\n' + voluntary_driver(controller=f"{__file__}:FlexAndExtendElbow"))
    model, engine, rec = run(path, 20)
    flexor, extensor = model.muscle_names.index("elbow_flexor"), model.muscle_names.index("elbow_extensor")
    reach = model.voluntary_reach(None)
    assert reach[extensor] == 0.0 and 0.5 < reach[flexor] < 1.0
    assert list(engine.rejected) == [(0, "not_voluntary")] and engine.rejected[(0, "not_voluntary")] >= 3
    assert rec["u_voluntary"][-1][flexor] == 0.8 and not rec["u"][-1].any()
    assert engine.plant.excitation[flexor] == reach[flexor] * 0.8 and engine.plant.excitation[extensor] == 0.0


def test_bad_roles_are_config_errors_naming_the_key(tmp_path):
    bad = write_config(tmp_path, voluntary_driver().replace('"voluntary"', '"patient"'))
    with pytest.raises(ConfigError, match=r"driver\[0\]\.role.*controller, voluntary"):
        load_service_config(bad)
    nobody = write_config(tmp_path, voluntary_driver(), 'name = "none"\ndefault_state = "paralysed"', "none.toml")
    with pytest.raises(ConfigError, match=r"driver\[0\]\.role.*no voluntary muscle group"):
        load_service_config(nobody)
    out = hil("check-config", bad)
    assert out.returncode == 2 and "driver[0].role" in out.stderr and "Traceback" not in out.stderr


def test_a_lost_voluntary_source_lets_go(tmp_path):
    """The source's transport dies: its latched drive goes to zero (and the log says so, for the replay)."""
    model, engine, drivers = build_engine(load_service_config(write_config(tmp_path, voluntary_driver())))
    body = TickBody(engine, drivers)
    body.step(0, 0)
    assert engine.voluntary_drive.values.max() == 0.4
    engine.driver_lost(0, 0)
    assert engine.voluntary_drive.values.max() == 0.0
    for d in drivers:
        d.shutdown()


def test_the_example_records_and_replays_bit_for_bit(tmp_path):
    """configs/c5-shoulder-command.toml offline: the shrug raises the shoulder, the controller reads it and
    flexes the elbow through the biceps channel; the recording has u_voluntary and KIND_VOLUNTARY commands and
    replays bit for bit."""
    rec_path = tmp_path / "c5.hilrec"
    out = hil("run", "--config", EXAMPLE, "--offline", "--duration", "5", "--record", rec_path)
    assert out.returncode == 0, out.stderr
    reader = RecordingReader(rec_path)
    ticks, commands = reader.read("ticks"), reader.read("commands")
    q = np.degrees(ticks["frame"]["q"])
    assert q[:, SCZ].max() - q[0, SCZ] > 5.0 and q[:, ELX].max() - q[0, ELX] > 30.0
    assert (commands["kind"] == KIND_VOLUNTARY).sum() > 0 and ticks["u_voluntary"].max() == 0.4
    result = replay_recording(str(rec_path))
    assert result["identical"] and result["ticks"] == 1250, result
    out = hil("export", rec_path, "--csv", tmp_path / "c5.csv")
    header = (tmp_path / "c5.csv").read_text().split("\n", 1)[0].split(",")
    assert out.returncode == 0 and header[-1] == "u_voluntary_anconeus5" and header.count("u_voluntary_trapclav1") == 1


def test_a_real_time_run_with_the_patient_replays_bit_for_bit(tmp_path):
    cfg = tmp_path / "rt.toml"
    cfg.write_text(f'include = ["{EXAMPLE}"]\n[metrics]\nenabled = false\n')
    rec_path = tmp_path / "rt.hilrec"
    out = hil("run", "--config", cfg, "--duration", "1", "--record", rec_path)
    assert out.returncode == 0, out.stderr
    result = replay_recording(str(rec_path))
    assert result["identical"] and result["ticks"] == 250, result


def test_without_a_voluntary_source_nothing_changes(tmp_path):
    """A run without a voluntary driver has no u_voluntary field and gives the frames of the same run offline."""
    path = write_config(tmp_path, f'[[driver]]\ntype = "loopback"\ncontroller = "{__file__}:BicepsThenSilent"\n')
    cfg = load_service_config(path)
    assert run_offline(cfg, 10).ticks == 10
    _, engine, rec = run(path, 10)
    assert "u_voluntary" not in rec.dtype.names and engine.voluntary_drive.values.shape == (0,)


def test_an_lsl_stream_is_a_voluntary_source(tmp_path, lsl_config):
    """A real LSL outlet with one excitation per configured group drives the patient's groups; a paralysed group
    in it is refused as not_voluntary, an out-of-range sample is counted, and a lost stream lets go."""
    import time
    import uuid

    import pylsl

    name = f"patient-{uuid.uuid4().hex[:8]}"
    driver = (f'[[driver]]\ntype = "lsl"\nrole = "voluntary"\ngroups = ["trapclav", "levscap", "triclong"]\n'
              f'[driver.inlet]\nname = "{name}"\n')
    model, engine, drivers = build_engine(load_service_config(write_config(tmp_path, driver)))
    body, tick = TickBody(engine, drivers), 0
    names = np.array([n.rstrip("0123456789") for n in model.muscle_names])
    shrug = np.isin(names, ["trapclav", "levscap"])

    def run_until(condition, timeout_s=20.0):
        nonlocal tick
        t_end = time.monotonic() + timeout_s
        while not condition():
            assert time.monotonic() < t_end, "timed out"
            body.step(tick, time.monotonic_ns())
            tick += 1
            time.sleep(0.004)
    try:
        outlet = pylsl.StreamOutlet(pylsl.StreamInfo(name, "FESCommand", 3, 0, "float32", name))
        run_until(drivers[0].connected)
        outlet.push_sample([0.4, 0.4, 0.3])
        run_until(lambda: engine.voluntary_drive.values[shrug].min() == np.float32(0.4))
        assert not engine.voluntary_drive.values[~shrug].any()
        assert engine.rejected.get((0, "not_voluntary"), 0) >= 1
        outlet.push_sample([1.5, 0.2, 0.0])
        run_until(lambda: engine.rejected.get((0, "out_of_range"), 0) == 1)
        assert engine.voluntary_drive.values[shrug].min() == np.float32(0.4)     # the bad sample is not applied
        del outlet                                                              # the stream is lost: zeros
        run_until(lambda: not engine.voluntary_drive.values.any())
    finally:
        for d in drivers:
            d.shutdown()


@pytest.mark.parametrize("driver, words", [
    ('type = "lsl"\nrole = "voluntary"\n', "needs the muscle groups"),
    ('type = "lsl"\nrole = "voluntary"\ngroups = ["trapclav", "shrug"]\n', "distinct muscle groups"),
    ('type = "lsl"\ngroups = ["trapclav"]\n', "voluntary source only"),
])
def test_lsl_voluntary_config_errors_name_the_key(tmp_path, lsl_config, driver, words):
    out = hil_in_process("check-config", write_config(tmp_path, f"[[driver]]\n{driver}"))
    assert out.returncode == 2 and "driver[0].groups" in out.stderr and words in out.stderr, out.stderr
