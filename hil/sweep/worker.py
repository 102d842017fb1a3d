"""The Dask side of ``hil sweep`` (:mod:`hil.sweep.runner`): the local cluster it starts (``hil bench sweep`` starts the
same one) and :class:`WarmUp`, the worker plugin that readies every worker once, when it joins, instead of in
its first run.

A fresh worker's first run would otherwise also import the run machinery, load (or compile) the numba kernels
and build the model. The plugin does that with a one-tick run of the sweep's first valid task: on the workers
already there when the client registers it (the registration returns once they are ready), and on every worker
that joins later (a restarted or added one) before it takes a task.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time

from distributed import LocalCluster, WorkerPlugin

from hil.sweep.task import RunTask, run_task

logger = logging.getLogger(__name__)

WARM_UP_DURATION_S = 1e-9
"""The warm-up run's duration: below any loop period, so one tick (:func:`hil.service.build.ticks_for`)."""
WARM_UP_CANDIDATES = 3
"""The sweep's first tasks a warm-up tries in turn until one is ok (a variant may be invalid)."""


MAX_LOCAL_WORKERS = 256
"""Most local worker processes (*proposal*: each holds a plant and numba's compiled kernels, about 0.3 GB, so 256
workers want a large machine; a larger number is a typo)."""


def local_cluster(workers: int, dashboard_address: str | None = None) -> LocalCluster:
    """``workers`` worker processes on this machine, one thread each."""
    return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=dashboard_address)


class WarmUp(WorkerPlugin):
    """On a worker as it joins: one tick of the first of ``tasks`` (their configs, no recording) that runs ok.
    There, ``seconds`` is how long that took, ``finished`` when it ended (``time.time()``) and ``row`` the results
    row of that tick. Named after the configs and idempotent: registered again (a restarted sweep, ``hil bench
    sweep`` then ``hil sweep``), it warms no worker twice. It runs on the worker's event loop, which waits for it
    (in a thread the loop would take the interpreter from it)."""

    idempotent = True

    def __init__(self, tasks: list[RunTask]) -> None:
        self.tasks = [dataclasses.replace(t, duration_s=WARM_UP_DURATION_S, record_path=None)
                      for t in tasks[:WARM_UP_CANDIDATES]]
        doc = json.dumps([[t.raw, t.config_path] for t in self.tasks], sort_keys=True, default=str)
        self.name = "hil-sweep-warm-up-" + hashlib.sha256(doc.encode()).hexdigest()[:12]
        self.seconds: float | None = None
        self.finished: float | None = None
        self.row: dict | None = None

    def setup(self, worker) -> None:
        t0 = time.perf_counter()
        try:
            for task in self.tasks:
                self.row = run_task(task)
                if self.row["status"] == "ok":
                    break
        except Exception:           # not the worker's failure: the sweep's own run of the task reports it
            logger.exception("hil sweep: warm-up %s failed", self.name)
        self.seconds, self.finished = time.perf_counter() - t0, time.time()


def warm_up(client, tasks: list[RunTask]) -> WarmUp:
    """Register :class:`WarmUp` of ``tasks`` (a sweep's, in order) with ``client``'s cluster; returns once the
    workers there are warm."""
    plugin = WarmUp(tasks)
    client.register_plugin(plugin)
    return plugin


def warm_ups(client, name: str) -> dict[str, dict | None]:
    """Each worker's warm-up under the plugin ``name``, by address: its ``seconds`` and when it ``finished``
    (``time.time()`` there); None where it has none or it has not finished."""
    return client.run(_warm_up, name=name)


def _warm_up(dask_worker, name: str) -> dict | None:
    plugin = dask_worker.plugins.get(name)
    if plugin is None or plugin.finished is None:
        return None
    return {"seconds": plugin.seconds, "finished": plugin.finished}
