"""Patient populations in sweeps (hil.sweep.population) and the failure ranking of the report (hil.sweep.failures)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import write_sweep

from hil.config import service_config_from_dict
from hil.sweep.failures import failed_criteria, rank_failures, read_failure
from hil.sweep.population import lognormal_factor, sample_one, sample_patients
from hil.sweep.runner import tasks
from hil.sweep.spec import load_sweep, variants
from sim.das3.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]
POPULATION = """
[population]
presets = ["c5-tetraplegia", "stroke-hemiparesis"]
n = {n}
seed = {seed}
strength_cv = 0.4
group_strength_cv = 0.2
spasticity_gain_cv = 0.5
"""


def _spec(tmp_path, n=3, seed=1, extra="", duration=0.4):
    return load_sweep(str(write_sweep(tmp_path, duration, POPULATION.format(n=n, seed=seed) + extra)))


def _strengths(patient) -> dict:
    return {g: spec["strength"] for g, spec in patient.table["groups"].items()}


def test_patients_are_seeded_and_independent_of_the_population_size(tmp_path):
    small, large = sample_patients(_spec(tmp_path, n=2).population), sample_patients(_spec(tmp_path, n=5).population)
    again = sample_patients(_spec(tmp_path, n=2).population)
    other_seed = sample_patients(_spec(tmp_path, n=2, seed=2).population)
    assert [p.table for p in small] == [p.table for p in again]
    assert [p.label for p in small] == ["c5-tetraplegia/0", "c5-tetraplegia/1", "stroke-hemiparesis/0",
                                        "stroke-hemiparesis/1"]
    by_label = {p.label: p.table for p in large}
    assert _strengths(small[0]) == {g: by_label["c5-tetraplegia/0"]["groups"][g]["strength"]
                                    for g in _strengths(small[0])}
    assert _strengths(small[0]) != _strengths(other_seed[0])


def test_strength_factors_have_mean_one_and_the_configured_spread(tmp_path):
    population = _spec(tmp_path, n=1).population
    rng = np.random.default_rng(0)
    factors = np.array([lognormal_factor(rng, 0.4) for _ in range(20000)])
    assert abs(factors.mean() - 1.0) < 0.02 and abs(factors.std() / factors.mean() - 0.4) < 0.02
    subject = np.array([sample_one(population, 0, i).strength_factor for i in range(2000)])
    assert abs(subject.mean() - 1.0) < 0.04 and abs(subject.std() - 0.4) < 0.04
    # every group of a patient scales from the preset's strength: c5 triclong is 0.6 in the preset
    ratios = [sample_one(population, 0, i).table["groups"]["triclong"]["strength"]
              / (0.6 * sample_one(population, 0, i).strength_factor) for i in range(500)]
    assert abs(np.std(np.log(ratios)) - math.sqrt(math.log1p(0.2 ** 2))) < 0.02


def test_spastic_gains_spread_and_spread_keys_apply(tmp_path):
    spec = _spec(tmp_path, n=40, extra='[population.spread]\n"groups.bicl.state" = {choice = ["paralysed", '
                                        '"denervated"]}\n')
    patients = sample_patients(spec.population)
    stroke = [p for p in patients if p.preset == "stroke-hemiparesis"]
    gains = [p.table["groups"]["bicb"]["spasticity"]["gain"] for p in stroke]
    assert len(set(gains)) == len(stroke) and all(g > 0 for g in gains)
    assert {p.table["groups"]["bicl"]["state"] for p in patients} == {"paralysed", "denervated"}
    assert all("spasticity" not in p.table["groups"]["bicb"] for p in patients if p.preset == "c5-tetraplegia")


def test_each_run_uses_its_sampled_patient(tmp_path):
    spec = _spec(tmp_path, n=2, extra='[grid]\n"driver.0.kp_ma_per_rad" = [40, 80]\n')
    runs = variants(spec)
    assert len(runs) == 2 * 4 and len({r.id for r in runs}) == 8
    for task in tasks(spec, runs, str(tmp_path / "out"))[:4]:
        cfg = service_config_from_dict(task.raw, task.config_path)
        want = task.variant.patient.table["groups"]
        assert {g: s.strength for g, s in cfg.patient.groups} == {g: want[g]["strength"] for g in want}
        assert task.variant.columns["patient"] == task.variant.patient.label


@pytest.mark.parametrize("extra, key, words", [
    ('[population.spread]\n"groups.bicl.state" = {choice = ["paralyzed"]}\n', "population", "paralyzed"),
    ('[population.spread]\n"groups.bicl.strength" = {gauss = [1, 0.1]}\n', "population.spread.groups.bicl.strength",
     "normal"),
    ('[grid]\n"patient.groups.bicl.strength" = [0.5]\n', "population", "[population.spread]"),
    ('[population.spread]\n"name.first" = {choice = ["x"]}\n', "population.spread.name.first", "sweep.toml"),
    ('[failure]\nmax_rms_error_deg = -1\n', "failure.max_rms_error_deg", "[0, 360]"),
])
def test_bad_population_and_failure_tables_name_the_key(tmp_path, extra, key, words):
    with pytest.raises(ConfigError) as err:
        _spec(tmp_path, extra=extra)
    assert err.value.key == key and words in str(err.value)


def _row(**kw):
    return {"id": "x", "status": "ok", "stopped_by": "duration", "gh_unstable_ticks": 0, "gh_min_margin": 0.3,
            "rms_error_deg": 5.0, "final_error_deg": 0.1, "settling_time_s": 1.0, **kw}


@pytest.mark.parametrize("row, reason", [
    (_row(stopped_by="gh_unstable"), "safety stop"),
    (_row(gh_unstable_ticks=3), "GH unstable"),
    (_row(gh_min_margin=-2.0), "GH margin"),
    (_row(settling_time_s=None), "never settled"),
    (_row(rms_error_deg=20.0), "RMS error"),
    (_row(final_error_deg=-3.0), "final error"),
    ({"id": "x", "status": "error", "error": "PlantDivergedError", "input_error": False}, "run error"),
])
def test_each_failure_criterion_fails_a_run_and_a_clean_run_passes(row, reason):
    criteria = read_failure({"failure": {"max_rms_error_deg": 10.0, "max_final_error_deg": 2.0,
                                         "min_gh_margin": 0.0}}, "sweep.toml")
    assert failed_criteria(_row(), criteria) == []
    assert failed_criteria({"status": "error", "input_error": True}, criteria) == []
    assert [r for r in failed_criteria(row, criteria) if r.startswith(reason)]


def test_the_ranking_puts_the_most_failed_criteria_then_the_largest_error_first():
    rows = [_row(id="pass"), _row(id="one", rms_error_deg=3.0, settling_time_s=None),
            _row(id="two", gh_unstable_ticks=5, settling_time_s=None, rms_error_deg=1.0),
            _row(id="one-worse", rms_error_deg=9.0, settling_time_s=None)]
    ranked = rank_failures(rows, read_failure({}, ""), [])
    assert [e["id"] for e in ranked["ranking"]] == ["two", "one-worse", "one", "pass"]
    assert ranked["failed"] == 3 and ranked["judged"] == 4


def test_a_population_sweep_reports_where_the_controller_fails(tmp_path):
    sweep = write_sweep(tmp_path, 0.5, POPULATION.format(n=2, seed=3) + "[failure]\nmax_final_error_deg = 1.0\n")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "hil", "sweep", str(sweep), "--out", str(out), "--workers", "0",
                           "--report", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["report"]
    failures = report["failures"]
    assert failures["judged"] == 4 and failures["by_preset"]["c5-tetraplegia"]["runs"] == 2
    # 0.5 s is too short to reach 90 deg from rest: every run fails the final-error limit, and says so
    assert failures["failed"] == 4 and all(any(r.startswith("final error") for r in e["failed"])
                                           for e in failures["ranking"])
    assert {e["patient"] for e in failures["ranking"]} == {"c5-tetraplegia/0", "c5-tetraplegia/1",
                                                            "stroke-hemiparesis/0", "stroke-hemiparesis/1"}
    assert (out / "report" / "failures.png").stat().st_size > 10_000
    header = (out / "results.csv").read_text().splitlines()[0].split(",")
    assert header[1:5] == ["patient_preset", "patient", "patient_strength_factor", "status"]
