"""Fitting the reduced arm to a recorded motion (sim.fitting.mtg_motion, `hil fit mtg`): inverse dynamics against the
plant's own torques, a weakened arm made feasible again, bad motion files."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_mtg_plant import TEST_MTGS

from sim.das3.config import ModelConfig
from sim.das3.model import load_model
from sim.fitting.mtg_fit import check_feasibility
from sim.fitting.mtg_motion import ANGLE_COLUMNS, MotionError, fit_arm, load_motion, weakened
from sim.mtg.model import FORMAT, MtgModel, load_mtg_parameters, parse_mtg_parameters
from sim.mtg.plant import MtgPlant

ROOT = Path(__file__).resolve().parents[2]
STEP = 0.001
A_MAX = 0.7


@pytest.fixture(scope="module")
def model():
    return MtgModel(load_model(ModelConfig()), parse_mtg_parameters({"format": FORMAT, "mtgs": TEST_MTGS}))


def _record(model, directory: Path, co_contraction: float, hand_force_y: float = 0.0):
    """1.5 s of the test arm: the elbow flexor (and ``co_contraction`` times it on the extensor) and 0.6 of it on
    the elevator, ramped up to A_MAX and back; the motion as `hil simulate` writes it (time, th angles, ELx,
    PSy) and the MTG coordinate torques every step applied."""
    plant = MtgPlant(model, STEP)
    plant.set_loads(hand_force=[0.0, hand_force_y, 0.0])
    u = np.zeros(model.n_muscles)
    rows, torques = [], []
    for n in range(1500):
        t = (n + 1) * STEP
        level = A_MAX * min(1.0, t / 0.5) * (1.0 if t < 1.0 else max(0.0, 1.0 - (t - 1.0) / 0.5))
        u[model.params.index("ef")] = level
        u[model.params.index("ee")] = co_contraction * level
        u[model.params.index("el")] = 0.6 * level
        v_before = plant.x[5:10].copy()
        plant.step(u)
        ct = plant.workspace.coord_torque     # T, dT/dq, dT/dqd at the step's start; the step applies them
        v = plant.x[5:10]                     # linearised to its end (sim.mtg.step):
        torques.append(ct[:, 0] + ct[:, 1] * STEP * v + ct[:, 2] * (v - v_before))
        rows.append([t, *plant.outputs.th_angles, plant.outputs.q[9], plant.outputs.q[10], hand_force_y])
    path = directory / "motion.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["time", *ANGLE_COLUMNS, "hand_force_y"])
        w.writerows([[repr(float(v)) for v in r] for r in rows])
    return path, np.array(torques)


@pytest.fixture(scope="module")
def recorded(model, tmp_path_factory):
    """A flexor-driven motion (no co-contraction: the paper's Eq. (7) gives the net torque to one MTG)."""
    return _record(model, tmp_path_factory.mktemp("motion"), 0.0)


def test_inverse_dynamics_recovers_the_plants_mtg_torques(model, tmp_path):
    """Under a 15 N downward hand force given as a load column (it adds several N m at elbow and shoulder)."""
    path, torques = _record(model, tmp_path, 0.8, -15.0)   # co-contraction keeps the elbow inside its range
    motion = load_motion(path, model)
    assert motion.torque_source == "inverse dynamics"
    inner = slice(5, -5)         # one-sided differences at the ends
    for c in (1, 3):             # elevation and elbow: the driven coordinates
        err = motion.torque[inner, c] - torques[inner, c]
        peak = np.max(np.abs(torques[:, c]))
        # central differences of sampled angles sit half a step off the first-order plant's own increments:
        # an O(h) difference, largest where the excitation ramps turn
        assert np.sqrt(np.mean(err ** 2)) < 0.015 * peak and np.max(np.abs(err)) < 0.05 * peak, c


def test_fit_makes_a_weakened_arm_feasible_again(model, recorded):
    path, _ = recorded
    motion = load_motion(path, model)
    start = weakened(model.params, 0.6)
    result = fit_arm(start, motion, A_MAX, 1.0)
    flexor = result.joints["elbow_flexion"][0].mtgs[0]
    assert not flexor.check_before.feasible and flexor.check_before.worst_kind == "a>a_max"
    assert result.feasible
    fitted = result.fitted()
    spec = fitted.mtgs[fitted.index("ef")]
    assert spec.fit.s_tau > 1.0            # made stronger, no more than needed (the recorded arm is 1/0.6)
    assert spec.fit.s_tau <= 1.0 / 0.6 + 1e-6 or spec.fit.s_a != 1.0 or spec.fit.s_v != 1.0
    # the nonlinear check, independently of the fit's own report
    check = check_feasibility(spec.curves, spec.fit, motion.q[:, 3], motion.qd[:, 3], motion.torque[:, 3],
                              spec.direction, A_MAX, 1.0)
    assert check.feasible and check.a_max <= A_MAX + 1e-6


def test_hil_fit_mtg_writes_a_parameter_file_the_plant_loads(model, recorded, tmp_path):
    path, _ = recorded
    params = tmp_path / "test_arm.json"
    params.write_text(json.dumps({"format": FORMAT, "mtgs": TEST_MTGS}))
    out = tmp_path / "fit"
    run = subprocess.run([sys.executable, "-m", "hil", "fit", "mtg", "--motion", str(path), "--amax", str(A_MAX),
                          "--tmax-pe", "1.0", "--parameters", str(params), "--pre-weaken", "0.6", "--out", str(out),
                          "--json"], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    flexor = next(r for r in report["mtgs"] if r["mtg"] == "ef")
    assert not flexor["feasible_before"] and flexor["feasible_after"] and report["feasible"]
    assert flexor["fitted"]["s_tau"] > 1.0 and flexor["active_constraints"]["eq10"] >= 1
    fitted = load_mtg_parameters(out / "mtg_fitted.json")
    assert fitted.mtgs[fitted.index("ef")].fit.s_tau == pytest.approx(flexor["fitted"]["s_tau"])
    MtgPlant(MtgModel(model.das3, fitted), 0.004).step(np.zeros(model.n_muscles))
    assert (out / "envelopes.png").stat().st_size > 10_000


def test_an_arm_too_weak_for_any_fit_exits_1(recorded, tmp_path):
    """Strength capped below what the weakened flexor needs: the after-the-fact check says infeasible."""
    path, _ = recorded
    params = tmp_path / "test_arm.json"
    params.write_text(json.dumps({"format": FORMAT, "mtgs": TEST_MTGS}))
    run = subprocess.run([sys.executable, "-m", "hil", "fit", "mtg", "--motion", str(path), "--amax", str(A_MAX),
                          "--tmax-pe", "1.0", "--parameters", str(params), "--pre-weaken", "0.6", "--max-scale", "1.02",
                          "--out", str(tmp_path / "fit"), "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert run.returncode == 1, run.stderr
    report = json.loads(run.stdout)
    flexor = next(r for r in report["mtgs"] if r["mtg"] == "ef")
    assert not report["feasible"] and not flexor["feasible_after"] and flexor["worst_after"]["kind"] == "a>a_max"
    assert set(flexor["active_constraints"]["bounds"]) >= {"s_tau<=", "s_a<=", "s_v<="}


@pytest.mark.parametrize("edit, words", [
    (lambda rows: [r[:2] for r in rows], "missing column"),
    (lambda rows: [rows[0]] + rows[1:][::-1], "increase strictly"),
    (lambda rows: [rows[0], *rows[1:3], ["nan"] * len(rows[0]), *rows[4:]], "finite"),
    (lambda rows: rows[:3], "at least"),
    (lambda rows: [rows[0], *([r[0], r[1], "0.0", *r[3:]] for r in rows[1:])], "elevation"),
])
def test_bad_motion_files_are_clear_errors(model, recorded, tmp_path, edit, words):
    path, _ = recorded
    with open(path, newline="") as f:
        rows = list(csv.reader(f))[:50]
    bad = tmp_path / "bad.csv"
    with open(bad, "w", newline="") as f:
        csv.writer(f).writerows(edit(rows))
    with pytest.raises(MotionError, match=words) as info:
        load_motion(bad, model)
    assert "bad.csv" in str(info.value)
