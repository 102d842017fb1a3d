"""``hil bench gym``: the rows it measures (batched and synced at each count, the single environment), the
per-core ratio it prints and its bound from the time in compiled ticks, the MyoSuite peer's one-line absence, and bad options."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers import hil_in_process

ROOT = Path(__file__).resolve().parents[2]


def bench(*args: str, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "hil", "bench", "gym", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=600)


def test_the_benchmark_measures_batched_and_synced_rows_and_their_ratio():
    out = bench("--envs", "1,2", "--steps", "40", "--rounds", "1", "--plant", "mtg", "--no-peer", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    rows = {(r["label"], r["num_envs"]): r for r in doc["rows"]}
    assert set(rows) == {("mtg single", 1), ("mtg batched", 1), ("mtg sync", 1), ("mtg batched", 2), ("mtg sync", 2)}
    assert all(r["env_steps"] >= 40 and r["cpu_s"] > 0 for r in rows.values())
    ratio = rows[("mtg batched", 2)]["env_steps"] / rows[("mtg batched", 2)]["cpu_s"] / (
        rows[("mtg sync", 2)]["env_steps"] / rows[("mtg sync", 2)]["cpu_s"])
    assert abs(doc["speedup_per_core"]["mtg x2"] - ratio) < 0.01
    assert doc["action_period_ms"] == 20.0 and doc["machine"]["cpus"] >= 1
    for row in rows.values():                          # the compiled ticks: part of every step, never all of it
        assert 0.0 < row["compiled_s"] < row["wall_s"]
    batch, sync = rows[("mtg batched", 2)], rows[("mtg sync", 2)]
    bound = (sync["cpu_s"] / sync["env_steps"]) / (batch["compiled_s"] / batch["env_steps"])
    assert abs(doc["speedup_bound_without_python"]["mtg x2"] - bound) < 0.01 and bound > ratio


def test_without_the_peer_environment_the_table_says_how_to_make_it(tmp_path):
    out = bench("--envs", "1", "--steps", "20", "--rounds", "1", "--plant", "mtg", "--peer-venv",
                str(tmp_path / "no-venv"))
    assert out.returncode == 0, out.stderr
    assert "hil bench gym" in out.stdout and "batched" in out.stdout and "sync" in out.stdout
    assert "MyoSuite peer: MyoSuite peer not installed" in out.stdout and "--peer-setup" in out.stdout


def test_bad_options_are_one_line():
    for args, words in ((["--envs", "eight"], "--envs"), (["--envs", "0"], "--envs"), (["--plant", "ode"], "--plant"),
                        (["--rounds", "0"], "--rounds"), (["--action-period-ms", "0"], "--action-period-ms"),
                        (["--steps", "100000000"], "--steps must be a whole number from 1 to 1000000"),
                        (["--rounds", "1000"], "--rounds must be a whole number from 1 to 100"),
                        (["--threads", "0"], "threads: a whole number from 1 to 1024, not 0")):
        out = hil_in_process("bench", "gym", *args, "--no-peer")
        assert out.returncode == 2 and words in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
