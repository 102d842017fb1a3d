"""A Dask worker killed (SIGKILL) in the middle of a sweep's run loses only that run: the scheduler reruns it
on another worker, every run ends up in results.jsonl exactly once, and the rerun's metrics equal an in-process
run of the same variant. With ``distributed.scheduler.allowed-failures`` = 0 the runs the worker held (the one
it ran, the one queued behind it) are error rows (KilledWorker) and the sweep still finishes."""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import dask
import pytest
from distributed import Client, LocalCluster, get_task_stream

from hil.sweep import run_sweep, run_task, tasks
from hil.sweep_spec import load_sweep, variants

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "configs" / "elbow-hold.toml"
DEADLINE_S = 420.0


def _spec(tmp_path: Path):
    # 6 runs of 30000 ticks at 1 ms: seconds each, so a kill lands in the middle of one
    path = tmp_path / "sweep.toml"
    path.write_text(f'base = "{BASE}"\nduration_s = 30.0\n[grid]\n"loop.period_ms" = [1.0]\n'
                    '"driver.0.kp_ma_per_rad" = [40, 60, 80, 100, 120, 140]\n')
    return load_sweep(str(path))


def _rows(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _worker_state(dask_worker):
    """(pid, keys executing) of a worker (run there by ``Client.run``)."""
    return os.getpid(), [ts.key for ts in dask_worker.state.executing]


def _kill_a_running_task(client: Client, out: Path, sweep: threading.Thread) -> tuple[str, str, set]:
    """Once a run has finished (the workers are warm), SIGKILL a worker in the middle of an unfinished run:
    (its address, the run's key, every key the scheduler had given it, the next one queued there too)."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and sweep.is_alive():
        done = {f"hil-run-{r['id']}" for r in _rows(out)}
        if done:
            for address, (pid, keys) in client.run(_worker_state).items():
                running = [k for k in keys if k not in done]
                if running:
                    assigned = set(client.processing(workers=[address])[address])
                    os.kill(pid, signal.SIGKILL)
                    return address, running[0], assigned | {running[0]}
        time.sleep(0.05)
    pytest.fail("no run in progress to kill before the sweep ended or the deadline")


@pytest.mark.parametrize("allowed_failures", [3, 0])
def test_a_killed_worker_loses_only_its_run(tmp_path, allowed_failures):
    spec, out = _spec(tmp_path), tmp_path / "out"
    result: dict = {}

    def sweep():
        try:
            result["summary"] = run_sweep(spec, str(out), scheduler=cluster.scheduler_address)
        except BaseException as exc:      # reported by the test, not lost in the thread
            result["error"] = exc

    with dask.config.set({"distributed.scheduler.allowed-failures": allowed_failures}):
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0")
    client = Client(cluster)
    thread = threading.Thread(target=sweep, daemon=True)
    try:
        with get_task_stream(client=client) as stream:
            thread.start()
            killed_worker, killed_key, assigned = _kill_a_running_task(client, out, thread)
            thread.join(DEADLINE_S)
            assert not thread.is_alive(), "the sweep did not finish"
        where = {rec["key"]: rec["worker"] for rec in stream.data}
    finally:
        client.close()
        cluster.close()
        thread.join(60)
    assert "error" not in result, repr(result.get("error"))
    rows = _rows(out)
    ids = [v.id for v in variants(spec)]
    assert Counter(r["id"] for r in rows) == Counter(ids)                  # every run exactly once
    killed = next(r for r in rows if f"hil-run-{r['id']}" == killed_key)
    if allowed_failures == 0:     # no second chance: the runs the worker held are error rows, the others ok
        lost = [r for r in rows if r["status"] != "ok"]
        assert killed in lost and {f"hil-run-{r['id']}" for r in lost} <= assigned
        assert all(r["status"] == "error" and r["error"].startswith("KilledWorker") for r in lost)
        return
    assert all(r["status"] == "ok" for r in rows)
    assert where[killed_key] != killed_worker                               # rerun on another worker
    local = run_task(tasks(spec, [v for v in variants(spec) if v.id == killed["id"]], str(tmp_path / "local"))[0])
    local = json.loads(json.dumps(local, default=float))
    assert {k: v for k, v in killed.items() if k != "wall_s"} == {k: v for k, v in local.items() if k != "wall_s"}
