"""`hil sweep` (hil.sweep.spec, hil.sweep.runner): variants of a base config run offline on a real local Dask cluster,
one results row per run, restart skips finished runs, bad variants are rows not failures."""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_sweep

from hil.sweep.spec import load_sweep, variants
from sim.das3.config import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _sweep_file(tmp_path: Path, body: str) -> Path:
    return write_sweep(tmp_path, 0.6, body)


def test_variants_are_the_grid_times_the_same_random_samples(tmp_path):
    spec = load_sweep(str(_sweep_file(tmp_path, '[grid]\n"driver.0.kp_ma_per_rad" = [40, 80, 120]\n'
                                                '[random]\nn = 2\nseed = 5\n"driver.0.target_deg" = {uniform = [60, 100]}\n'
                                                '"sensor.seed" = {choice = [1, 2, 3]}\n')))
    runs = variants(spec)
    assert len(runs) == 6 and len({r.id for r in runs}) == 6
    targets = [[r.values["driver.0.target_deg"] for r in runs if r.values["driver.0.kp_ma_per_rad"] == kp]
               for kp in (40, 80, 120)]
    assert targets[0] == targets[1] == targets[2] and all(60 <= t <= 100 for t in targets[0])
    assert [r.id for r in variants(spec)] == [r.id for r in runs]            # stable ids: a restart finds them


@pytest.mark.parametrize("body, key", [
    ('colour = "red"\n', "colour"),
    ('[grid]\n"sensor.seed" = []\n', "grid"),
    ('[random]\nn = 2\n"sensor.seed" = {lognormal = [0, 1]}\n', "random.sensor.seed"),
    ('[random]\nn = 0\n"sensor.seed" = {choice = [1]}\n', "random.n"),
])
def test_bad_sweep_files_name_the_key(tmp_path, body, key):
    with pytest.raises(ConfigError) as err:
        load_sweep(str(_sweep_file(tmp_path, body)))
    assert err.value.key == key


def _rows(out: Path) -> list[dict]:
    with open(out / "results.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_sweep_on_a_local_dask_cluster_resumes_and_reports_bad_variants(tmp_path):
    sweep = _sweep_file(tmp_path, '[grid]\n"driver.0.kp_ma_per_rad" = [40, 120]\n"loop.period_ms" = [4.0, 0.5]\n')
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "hil", "sweep", str(sweep), "--out", str(out), "--workers", "2", "--json"]
    first = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["runs"] == summary["run_now"] == 4 and summary["workers"] == 2
    assert (summary["ok"], summary["errors"]) == (2, 2) and "loop.period_ms" in summary["first_error"]
    assert "warning: 2 of 4 runs failed" in first.stderr
    assert summary["scheduler"].startswith("tcp://")
    rows = _rows(out)
    ok = [r for r in rows if r["status"] == "ok"]
    bad = [r for r in rows if r["status"] == "error"]
    assert len(ok) == 2 and len(bad) == 2                       # period 0.5 ms is outside 1..10 ms: a row each
    assert all("loop.period_ms" in r["error"] for r in bad)
    by_kp = {r["driver.0.kp_ma_per_rad"]: r for r in ok}
    assert by_kp["40"]["rms_error_deg"] != by_kp["120"]["rms_error_deg"]
    assert all(int(r["ticks"]) == 150 and float(r["charge_biceps_uc"]) > 0 for r in ok)
    again = json.loads(subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=600).stdout)
    assert again["run_now"] == 0 and again["skipped"] == 4 and len(_rows(out)) == 4
    # the same variant in this process gives the same metrics, bit for bit (deterministic offline runs)
    local = tmp_path / "local"
    subprocess.run([*cmd[:5], "--out", str(local), "--workers", "0", "--json"], check=True, capture_output=True, cwd=ROOT,
                   timeout=600)
    same = {r["id"]: r for r in _rows(local)}
    for r in ok:
        assert same[r["id"]]["rms_error_deg"] == r["rms_error_deg"]
        assert same[r["id"]]["charge_biceps_uc"] == r["charge_biceps_uc"]


# -- no sweep file hangs hil sweep or exhausts its memory; a sweep none of whose runs succeeds fails ------------

@pytest.mark.parametrize("body, key, words", [
    ('[random]\nn = 1000000000000\n"sensor.seed" = {choice = [1, 2]}\n', "random.n", "1000000000000 runs"),
    ("[grid]\n" + "".join(f'"sensor.k{i}" = [{", ".join(map(str, range(10)))}]\n' for i in range(9)), "grid",
     "1000000000 runs"),
    ("[grid]\n" + "".join(f'"sensor.k{i}" = [{", ".join(map(str, range(10)))}]\n' for i in range(6)), "grid",
     "1000000 runs"),
], ids=["random-1e12", "grid-1e9", "grid-1e6"])
def test_a_sweep_of_too_many_runs_is_refused_from_its_counts(tmp_path, body, key, words):
    """Counted from the sizes before a run or a sample is built (built first, 10^12 samples never end)."""
    from helpers import assert_one_error_line, hil_process
    sweep = _sweep_file(tmp_path, body)
    assert_one_error_line(*hil_process("sweep", sweep, "--out", tmp_path / "out", "--workers", "0"),
                          str(sweep), f"key {key!r}", words, "at most 100000")


@pytest.mark.parametrize("workers", ["-1", "1000000"])
def test_a_worker_count_out_of_range_is_refused_before_the_sweep_file_is_read(tmp_path, workers):
    from helpers import assert_one_error_line, hil_process
    assert_one_error_line(*hil_process("sweep", tmp_path / "nowhere.toml", "--out", tmp_path / "out", "--workers",
                                       workers), f"--workers must be a whole number from 0 to 256, not {workers}")


def test_a_device_as_the_initial_state_fails_the_sweep_before_any_worker(tmp_path):
    from helpers import assert_one_error_line, hil_process
    base = tmp_path / "base.toml"
    base.write_text(f'include = ["{ROOT / "configs" / "elbow-hold.toml"}"]\n[plant]\ninitial = "/dev/zero"\n')
    sweep = tmp_path / "sweep.toml"
    sweep.write_text(f'base = "{base}"\nduration_s = 0.2\n[grid]\n"sensor.seed" = [1, 2]\n')
    assert_one_error_line(*hil_process("sweep", sweep, "--out", tmp_path / "out", "--workers", "2"),
                          str(sweep), "every run failed (2)", "plant.initial", "/dev/zero", "not a regular file")


def test_a_sweep_whose_every_run_fails_names_the_sweep_file_and_key(tmp_path):
    """A typo in a grid key: each run's error names the sweep file's key, not the base config, and the sweep
    exits 2."""
    from helpers import assert_one_error_line, hil_process
    sweep = _sweep_file(tmp_path, '[grid]\n"driver.0.kp_ma_per_rx" = [40, 80]\n')
    code, err = hil_process("sweep", sweep, "--out", tmp_path / "out", "--workers", "0")
    assert_one_error_line(code, err, "every run failed (2)", f"{sweep}, swept key 'driver.0.kp_ma_per_rx'",
                          "unknown key")
    rows = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert all(r["error_key"] == "driver.0.kp_ma_per_rx" and str(sweep) in r["error"] for r in rows)


def test_finished_runs_are_read_from_a_damaged_results_file_and_a_fifo_is_refused(tmp_path):
    """Resuming reads ``results.jsonl``: lines that are not UTF-8, not JSON, nested too deep to parse or not an
    object are skipped (non-UTF-8 bytes were a UnicodeDecodeError traceback), the finished ids of the others are
    found; a FIFO in its place is one InputFileError instead of a wait without end."""
    import os
    import threading

    from hil.sweep.runner import finished_ids
    from sim.input_file import InputFileError
    out = tmp_path / "out"
    out.mkdir()
    lines = [b'{"id": "a1"}', b"\xff\xfe garbage", b"[" * 100000 + b"]" * 100000, b'["not", "an", "object"]',
             b'{"id": ["unhashable"]}', b'{"id": "b2", "rms_deg": 1.5}', b'{"id": "c3"']
    (out / "results.jsonl").write_bytes(b"\n".join(lines))
    assert finished_ids(str(out)) == {"a1", "b2"}
    fifo_dir = tmp_path / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "results.jsonl")
    outcome = []

    def resume():                    # in a thread: a reader that waits on the FIFO must fail the test, not hang it
        try:
            finished_ids(str(fifo_dir))
        except InputFileError as exc:
            outcome.append(str(exc))

    reader = threading.Thread(target=resume, daemon=True)
    reader.start()
    reader.join(30)
    assert len(outcome) == 1 and "not a regular file" in outcome[0], outcome
    assert finished_ids(str(tmp_path / "empty")) == set()
