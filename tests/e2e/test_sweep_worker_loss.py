"""A Dask worker killed (SIGKILL) in the middle of a sweep's run loses only the runs it held: the scheduler reruns
them on another worker, every run ends up in results.jsonl exactly once, and a rerun's metrics equal an
in-process run of the same variant. With ``distributed.scheduler.allowed-failures`` = 0 exactly the runs it held
are error rows (KilledWorker) and the sweep still finishes. Which runs the worker held is what the scheduler
recorded when it removed the worker (its ``remove-worker`` event), not a guess made before the kill."""
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
from helpers import write_sweep

from hil.sweep.runner import run_sweep, run_task, tasks
from hil.sweep.spec import load_sweep, variants

DEADLINE_S = 420.0


def _spec(tmp_path: Path):
    # 6 runs of 30000 ticks at 1 ms: seconds each, so a kill lands in the middle of one
    return load_sweep(str(write_sweep(tmp_path, 30.0, '[grid]\n"loop.period_ms" = [1.0]\n'
                                      '"driver.0.kp_ma_per_rad" = [40, 60, 80, 100, 120, 140]\n')))


def _rows(out: Path) -> list[dict]:
    path = out / "results.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _kill_a_busy_worker(client: Client, out: Path, sweep: threading.Thread) -> str:
    """Once a run has finished (the workers are warm), SIGKILL a worker the scheduler has given an unfinished
    run; returns its address."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and sweep.is_alive():
        done = {f"hil-run-{r['id']}" for r in _rows(out)}
        if done:
            pids = client.run(os.getpid)
            for address, keys in client.processing().items():
                if address in pids and set(keys) - done:
                    os.kill(pids[address], signal.SIGKILL)
                    return address
        time.sleep(0.05)
    pytest.fail("no run in progress to kill before the sweep ended or the deadline")


def _held(client: Client, address: str) -> set[str]:
    """The keys the scheduler had given the worker ``address`` when it removed it (from its remove-worker event)."""
    removals = [msg for _, msg in client.get_events("all")
                if msg.get("action") == "remove-worker" and msg.get("worker") == address]
    assert len(removals) == 1 and not removals[0]["expected"], removals
    return set(removals[0]["processing-tasks"])


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
            killed_worker = _kill_a_busy_worker(client, out, thread)
            thread.join(DEADLINE_S)
            assert not thread.is_alive(), "the sweep did not finish"
        where = {rec["key"]: rec["worker"] for rec in stream.data}
        held = _held(client, killed_worker)
    finally:
        client.close()
        cluster.close()
        thread.join(60)
    assert "error" not in result, repr(result.get("error"))
    rows = _rows(out)
    ids = [v.id for v in variants(spec)]
    assert Counter(r["id"] for r in rows) == Counter(ids)                  # every run exactly once
    assert held and held <= {f"hil-run-{i}" for i in ids}                  # the kill landed on runs of the sweep
    lost = {f"hil-run-{r['id']}" for r in rows if r["status"] != "ok"}
    if allowed_failures == 0:     # no second chance: exactly the runs the worker held are error rows
        assert lost == held
        assert all(r["error"].startswith("KilledWorker") for r in rows if r["status"] != "ok")
        return
    assert not lost
    assert all(where[key] != killed_worker for key in held)                # rerun on another worker
    rerun = [r for r in rows if f"hil-run-{r['id']}" in held]
    local = [run_task(t) for t in tasks(spec, [v for v in variants(spec) if f"hil-run-{v.id}" in held],
                                        str(tmp_path / "local"))]
    local = {r["id"]: json.loads(json.dumps(r, default=float)) for r in local}
    for row in rerun:
        assert {k: v for k, v in row.items() if k != "wall_s"} == {k: v for k, v in local[row["id"]].items()
                                                                   if k != "wall_s"}
