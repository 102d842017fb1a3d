"""The README's worked example of issue 17: a DAS3 motion (the forward-flexion feed-forward played in `hil
simulate`), the reduced arm pre-weakened so it cannot perform it at the activation the stimulation reaches,
`hil fit mtg`, and the fitted arm that can."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
from helpers import hil

ROOT = Path(__file__).resolve().parents[2]


def _hil(*args: str) -> subprocess.CompletedProcess:
    return hil(*args, timeout=600)


def test_worked_example_fits_a_weakened_arm_to_a_das3_motion(tmp_path):
    motion = tmp_path / "flexion.csv"
    sim = _hil("simulate", "--excitations", "examples/forward_flexion/feedforward.csv", "--initial",
               "examples/forward_flexion/initial_state.json", "--duration", "2.5", "--step", "0.001",
               "--out", str(motion))
    assert sim.returncode == 0, sim.stderr
    fit = _hil("fit", "mtg", "--motion", str(motion), "--amax", "0.1", "--tmax-pe", "1.0", "--pre-weaken", "0.8",
               "--out", str(tmp_path / "fit"), "--json")
    assert fit.returncode == 0, fit.stderr
    report = json.loads(fit.stdout)
    rows = {r["mtg"]: r for r in report["mtgs"]}
    elevator = rows["elevator"]
    assert report["torques"] == "inverse dynamics" and report["feasible"]
    assert not elevator["feasible_before"] and elevator["worst_before"]["kind"] == "a>a_max"
    assert elevator["activation_before"][1] > 0.1 >= elevator["activation_after"][1] - 1e-6
    assert elevator["fitted"]["s_tau"] > 1.0 and elevator["active_constraints"]["eq10"] >= 1
    assert all(r["feasible_after"] for r in rows.values())

    from sim.das3.model import load_model
    from sim.mtg.model import MtgModel, load_mtg_parameters
    from sim.mtg.plant import MtgPlant
    fitted = load_mtg_parameters(tmp_path / "fit" / "mtg_fitted.json")
    plant = MtgPlant(MtgModel(load_model(), fitted), 0.004)
    plant.step(np.zeros(plant.model.n_muscles))
    assert (tmp_path / "fit" / "envelopes.png").stat().st_size > 10_000
