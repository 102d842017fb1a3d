"""The plant benchmarks end to end: ``hil bench plant`` (its excitation schedules: constant, or drawn anew at a
controller's rate, ``--change-ms``), ``hil bench mtg`` and ``hil bench accuracy`` (figures printed, never
asserted beyond their consistency)."""
import json

import numpy as np
import pytest
from helpers import hil, hil_in_process

from hil.bench.plant import excitation_schedule


def test_a_constant_schedule_holds_every_element_at_the_excitation():
    schedule = excitation_schedule(138, 12, 0.05, None)
    assert len(schedule) == 12 and all(np.array_equal(u, np.full(138, 0.05)) for u in schedule)


def test_a_changing_schedule_draws_anew_every_period_and_holds_in_between():
    schedule = excitation_schedule(138, 23, 0.3, 5)
    assert len(schedule) == 23
    for i in range(1, 23):
        same = np.array_equal(schedule[i], schedule[i - 1])
        assert same == (i % 5 != 0), f"step {i}: changed {not same}"
    held = np.array(schedule[::5])
    assert held.min() >= 0.0 and held.max() <= 0.6
    assert abs(np.mean(excitation_schedule(138, 500, 0.3, 5)) - 0.3) < 0.03     # mean = --excitation
    assert np.array_equal(np.array(schedule), np.array(excitation_schedule(138, 23, 0.3, 5)))   # seeded
    assert max(u.max() for u in excitation_schedule(138, 10, 0.8, 2)) == 1.0                    # clipped


def test_bench_plant_under_changing_stimulation_reports_its_schedule():
    done = hil("bench", "plant", "--step", "0.004", "--steps", "40", "--excitation", "0.2", "--change-ms", "20",
               "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["change_ms"] == 20.0 and doc["excitation"] == 0.2
    assert doc["results"][0]["median_step_us"] > 0.0


@pytest.mark.parametrize("value", ["0", "-4", "nan", "inf"])
def test_bench_plant_refuses_a_bad_change_period(value):
    done = hil_in_process("bench", "plant", "--step", "0.004", "--steps", "10", "--change-ms", value)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: --change-ms"), done.stderr


@pytest.mark.parametrize("args, message", [
    (["plant", "--steps", "0"], "--steps must be a whole number from 1 to 10000000, not 0"),
    (["plant", "--steps", "100000000000"], "--steps must be a whole number from 1 to 10000000, not 100000000000"),
    (["mtg", "--steps", "100000000000"], "--steps must be a whole number from 1 to 10000000"),
    (["offline", "--runs", "0"], "--runs must be a whole number from 1 to 1000, not 0"),
    (["offline", "--runs", "1000000000"], "--runs must be a whole number from 1 to 1000"),
    (["accuracy", "--rtol", "0"], "--rtol must be in [1e-10, 1e-2], not 0"),      # the reference solve ran on and on
    (["accuracy", "--rtol", "nan"], "--rtol must be in [1e-10, 1e-2], not nan"),
])
def test_absurd_counts_are_refused_in_one_line_before_anything_runs(args, message):
    done = hil("bench", *args)          # a count in the billions used to run out of memory or run for days
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"Error: {message}"), done.stderr


def test_bench_mtg_times_the_reduced_arm_per_call_and_in_one_compiled_call():
    done = hil("bench", "mtg", "--step", "0.004", "--steps", "50", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    [row] = doc["results"]
    assert doc["steps"] == 50 and doc["n_mtg"] > 0 and row["step_s"] == 0.004
    assert 0.0 < row["median_step_us"] <= row["p99_step_us"] <= row["max_step_us"]
    assert row["in_kernel_step_us"] > 0.0 and row["realtime_factor"] == 0.004 / (row["in_kernel_step_us"] * 1e-6)


def test_bench_accuracy_compares_the_plant_with_the_reference_solver():
    done = hil("bench", "accuracy", "--duration", "0.012", "--rtol", "1e-4", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["reference"]["method"] == "Radau" and doc["reference"]["rtol"] == 1e-4
    per_dof = doc["rms_deg_per_dof"]
    assert len(per_dof) == 11 and doc["max_abs_deg"] >= max(per_dof.values()) > 0.0
    assert doc["rms_deg"] == pytest.approx(np.sqrt(np.mean(np.square(list(per_dof.values())))), rel=1e-9)
