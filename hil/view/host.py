"""The live view as a companion of a real-time run (``hil run --view``, ``hil serve --view``): the command line
builds a :class:`ViewHost` and hands it to :func:`hil.service.supervisor.supervise`, which knows it only as a
companion (start, check, close). The service core thus never imports the view.

The host owns the view's status block (:class:`hil.view.block.ViewBlock`) and its server process
(:mod:`hil.view.server`). Its :meth:`ViewHost.start` returns the tick-listener factory the real-time process
calls with the run's config (:func:`attach_view_writer`), which writes the block every few ticks. The view is
not a safety function: a server that dies is restarted (a failed restart is tried again every RETRY_S), and the
run goes on either way.
"""
from __future__ import annotations

import datetime
import functools
import multiprocessing as mp
import time
from dataclasses import dataclass

from drivers.ipc.process import stop_process
from hil.service import build as service
from hil.view.block import ViewBlock, ViewWriter
from hil.view.server import ViewSpec, start_view_server, url


@dataclass(frozen=True)
class ViewOptions:
    """``--view PORT`` and ``--view-host``: where the live view's page is served."""
    port: int
    host: str = "127.0.0.1"


class AttachedViewWriter(ViewWriter):
    """The real-time process's writer of the supervisor's view block, releasing its mapping on close."""

    def close(self, orphaned: bool = False) -> None:
        """Views first, then the block; ``orphaned``: the supervisor is gone, so this process unlinks it."""
        super().close()
        self.block.owner = orphaned
        self.block.release()


def attach_view_writer(block_name: str, cfg) -> AttachedViewWriter:
    """In the real-time process: the tick listener writing the view block ``block_name`` at the run's period."""
    return AttachedViewWriter(ViewBlock.attach(block_name), cfg.loop.period_s)


class ViewHost:
    """The view's block and server process, owned by the supervisor for one run."""

    RETRY_S = 5.0

    def __init__(self, options: ViewOptions) -> None:
        self.options = options
        self.block = self.spec = self.proc = None
        self.ctx, self._next_try = mp.get_context("spawn"), 0.0

    def start(self, run_spec) -> functools.partial:
        """Create the block, start the server for the run ``run_spec`` (a :class:`hil.service.rt_process.RtSpec`);
        the listener factory for the real-time process. Raises when the server cannot listen."""
        self.block = ViewBlock.create()
        started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        self.spec = ViewSpec(self.block.name, self.options.host, self.options.port, run_spec.config_path,
                             run_spec.overrides, run_spec.record_path, started)
        self._serve()
        return functools.partial(attach_view_writer, self.block.name)

    def _serve(self) -> None:
        self.proc = start_view_server(self.spec, self.ctx)
        service.say(f"live view at {url(self.spec.host, self.spec.port)}")

    def check(self) -> None:
        """Restart a dead view server (called from the supervisor's poll loop)."""
        if self.proc is not None and self.proc.is_alive():
            return
        now = time.monotonic()
        if self.proc is not None:
            service.say(f"the live view died (exit code {self.proc.exitcode}); restarting it")
            self.proc, self._next_try = None, now
        if now < self._next_try:
            return
        try:
            self._serve()
        except Exception as exc:
            self._next_try = now + self.RETRY_S
            service.say(f"the live view could not be restarted ({exc}); next try in {self.RETRY_S:g} s")

    def close(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            stop_process(self.proc, 5.0)
            self.proc = None
        if self.block is not None:
            self.block.release()
            self.block = None
