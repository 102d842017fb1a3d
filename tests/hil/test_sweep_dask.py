"""The Dask side of ``hil sweep`` (hil.sweep.worker, hil.sweep.runner._collect) on a real local cluster: a worker is
warmed once, when it joins (also one that joins after the sweep registered the warm-up), before it runs a task,
with the first of the sweep's tasks whose config is valid; a result is released as soon as its row is taken.
Nothing here is timed."""
from __future__ import annotations

import time
from pathlib import Path

import pytest
from distributed import Client, get_worker
from helpers import write_sweep

from hil.sweep.runner import _collect, tasks
from hil.sweep.spec import load_sweep, variants
from hil.sweep.worker import local_cluster, warm_up, warm_ups

RELEASE_DEADLINE_S = 30.0


def _todo(tmp_path: Path):
    """Tasks of a sweep whose first variant is invalid (a 0.5 ms period is outside 1..10 ms)."""
    path = write_sweep(tmp_path, 0.2, '[grid]\n"loop.period_ms" = [0.5, 4.0]\n"driver.0.kp_ma_per_rad" = [40, 120]\n')
    spec = load_sweep(str(path))
    return tasks(spec, variants(spec), str(tmp_path / "out"))


@pytest.fixture
def client():
    cluster = local_cluster(1, dashboard_address=":0")
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()


def _warm_up_row(name: str):
    """Run as a task: the row of the worker's warm-up ``name``, None if it has not finished."""
    plugin = get_worker().plugins.get(name)
    return None if plugin is None or plugin.seconds is None else plugin.row


def test_workers_are_warmed_when_they_join_before_their_first_task(tmp_path, client):
    todo = _todo(tmp_path)
    assert [t.variant.values["loop.period_ms"] for t in todo[:3]] == [0.5, 0.5, 4.0]    # two invalid ones first
    plugin = warm_up(client, todo)
    (first,) = client.nthreads()
    client.cluster.scale(2)
    client.wait_for_workers(2)
    (joined,) = set(client.nthreads()) - {first}
    for address in (first, joined):          # each worker's first task finds its warm-up done
        row = client.submit(_warm_up_row, plugin.name, workers=[address], pure=False).result()
        assert row is not None and row["status"] == "ok" and row["ticks"] == 1
        assert row["id"] == todo[2].variant.id
    done = warm_ups(client, plugin.name)
    assert set(done) == {first, joined} and all(w["seconds"] > 0 for w in done.values())
    assert warm_up(client, todo).name == plugin.name
    assert warm_ups(client, plugin.name) == done                      # registered again: nobody warmed twice


def _known(dask_scheduler, key: str) -> bool:
    return key in dask_scheduler.tasks


def _forgotten(client: Client, key: str) -> bool:
    """Whether the scheduler forgets ``key`` (a release reaches it asynchronously) before RELEASE_DEADLINE_S."""
    deadline = time.monotonic() + RELEASE_DEADLINE_S
    while client.run_on_scheduler(_known, key=key):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_result_is_released_when_its_row_is_taken(tmp_path, client):
    todo = _todo(tmp_path)
    forgotten = []

    def on_row(row):
        if not forgotten:                    # the first row, while _collect still runs
            forgotten.append(_forgotten(client, f"hil-run-{row['id']}"))

    _collect(client, todo, on_row)
    assert forgotten == [True]
