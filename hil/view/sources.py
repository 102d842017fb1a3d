"""Where the page's samples come from: the live status block (:class:`LiveSource`) or a recording
(:class:`ReplaySource`)."""
from __future__ import annotations

import math
import threading
import time

import numpy as np

from drivers.core.contract import STATUS_GH_UNSTABLE, STATUS_ROM, STATUS_WATCHDOG
from hil.config import service_config_from_dict
from hil.recording.hilrec import RecordingError, read_run_recording
from hil.view.block import BLOCK_DTYPE, ViewBlock
from hil.view.scene import Scene, dumps

READ_INTERVAL_S = 0.025
"""The view server reads the status block at 40 Hz: above the page's 25 frames/s, below the writer's rate."""

REPLAY_MAX_RATE_HZ = 50.0
"""A replay sends at most this many samples per second of the run."""

CHUNK = 250
"""Samples per chunk the replay page fetches (5 s at 50 Hz)."""

CACHED_CHUNKS = 64
"""Chunks a replay keeps built (the oldest built goes first)."""


def block_columns(snap: np.ndarray) -> dict:
    """A status block snapshot (shape (1,)) as the one-row columns of :meth:`Scene.samples`."""
    n = int(snap["n_channels"][0])
    cols = {k: snap[k] for k in ("tick", "time_s", "q", "th_angles", "gh_force", "gh_stability", "status")}
    cols.update(applied=snap["applied"][:, :n], lateness_s=snap["lateness_ns"] * 1e-9,
                max_lateness_s=snap["max_lateness_ns"] * 1e-9, compute_s=snap["compute_ns"] * 1e-9,
                deadline_misses=snap["deadline_misses"].astype(np.int64),
                counts=np.column_stack([snap["watchdog_trips"], snap["gh_unstable_ticks"],
                                        snap["rom_alarm_ticks"]]).astype(np.int64))
    return cols


class LiveSource:
    """Reads the status block every READ_INTERVAL_S in a thread and keeps the newest sample (JSON) for every
    stream to send; streams wait on :meth:`wait`."""

    mode = "live"

    def __init__(self, block: ViewBlock, scene: Scene) -> None:
        self.block, self.scene = block, scene
        self.cond = threading.Condition()
        self.version, self.data = 0, None
        self.clients = 0            # open streams; without one the block is not read
        self.stopped = threading.Event()
        self.info_bytes = dumps(scene.info(mode="live"))
        self.thread = threading.Thread(target=self._run, name="view-reader", daemon=True)

    def start(self) -> "LiveSource":
        self.thread.start()
        return self

    def _run(self) -> None:
        snap, last_tick = np.zeros(1, BLOCK_DTYPE), None
        next_read = time.monotonic()
        while not self.stopped.wait(max(0.0, next_read - time.monotonic())):
            next_read += READ_INTERVAL_S
            if not self.clients or self.block.read(snap) is None or int(snap["tick"][0]) == last_tick:
                continue
            last_tick = int(snap["tick"][0])
            data = dumps(self.scene.samples(block_columns(snap))[0])
            with self.cond:
                self.version, self.data = self.version + 1, data
                self.cond.notify_all()

    def watch(self, delta: int) -> None:
        """A stream opens (+1) or closes (-1)."""
        with self.cond:
            self.clients += delta

    def wait(self, version: int, timeout_s: float) -> tuple[int, bytes | None]:
        """The newest sample once it is newer than ``version`` (None after ``timeout_s`` without one)."""
        with self.cond:
            self.cond.wait_for(lambda: self.version != version or self.stopped.is_set(), timeout_s)
            return self.version, (self.data if self.version != version else None)

    def stop(self) -> None:
        """End the reader and the streams, then let go of the block."""
        self.stopped.set()
        with self.cond:
            self.cond.notify_all()
        if self.thread.is_alive():
            self.thread.join(2.0)
        if not self.thread.is_alive() and self.block is not None:
            self.block.release()
            self.block = None


def _counts(status: np.ndarray) -> np.ndarray:
    """Safety counters at each tick from the status bits: watchdog trips (the bit's rising edges),
    GH-unstable and ROM-alarm ticks so far."""
    wd = (status & STATUS_WATCHDOG) != 0
    trips = np.cumsum(wd & ~np.concatenate([[False], wd[:-1]]))
    return np.column_stack([trips, np.cumsum((status & STATUS_GH_UNSTABLE) != 0),
                            np.cumsum((status & STATUS_ROM) != 0)])


def recording_columns(ticks: np.ndarray, rows: np.ndarray, n_channels: int) -> dict:
    """The columns of :meth:`Scene.samples` at ``rows`` of a recording's ticks; lateness is the largest
    over the ticks since the previous row, misses and counters are totals up to the row."""
    frame = ticks["frame"]
    lateness = ticks["lateness_ns"] * 1e-9
    return {"tick": ticks["tick"][rows], "time_s": frame["time"][rows], "q": frame["q"][rows],
            "th_angles": frame["th_angles"][rows], "gh_force": frame["gh_force"][rows],
            "gh_stability": frame["gh_stability"][rows], "status": frame["status"][rows],
            "applied": ticks["applied"][rows, :n_channels, :3], "lateness_s": lateness[rows],
            "max_lateness_s": np.maximum.reduceat(lateness, rows), "compute_s": ticks["compute_ns"][rows] * 1e-9,
            "deadline_misses": np.cumsum(ticks["skipped_deadlines"] > 0)[rows],
            "counts": _counts(frame["status"])[rows]}


class ReplaySource:
    """A recording, picked at most REPLAY_MAX_RATE_HZ, served in chunks of CHUNK samples (built on request)."""

    mode = "replay"

    def __init__(self, path: str) -> None:
        reader = read_run_recording(path)
        h = reader.header
        ticks = reader.read("ticks")
        if not len(ticks):
            raise RecordingError(f"{path}: no ticks recorded; nothing to replay")
        step = max(1, math.ceil(1.0 / (REPLAY_MAX_RATE_HZ * h["period_s"]) - 1e-9))
        rows = np.arange(0, len(ticks), step)
        self.columns = recording_columns(ticks, rows, len(h["channel_names"]))
        self.n = len(rows)
        self.scene = Scene(service_config_from_dict(h["config"], h["config_path"]),
                           {"config_path": h["config_path"], "start_time": h["start_time_utc"], "recording": str(path)})
        self.info_bytes = dumps(self.scene.info(mode="replay", n_samples=self.n, chunk=CHUNK,
                                                sample_period_s=step * h["period_s"], warnings=reader.warnings))
        self.cache: dict[int, bytes] = {}
        self.lock = threading.Lock()

    def chunk(self, k: int) -> bytes | None:
        """Samples k * CHUNK ... (k + 1) * CHUNK - 1 as a JSON array; None past the end."""
        if not 0 <= k * CHUNK < self.n:
            return None
        with self.lock:
            if k not in self.cache:
                if len(self.cache) >= CACHED_CHUNKS:
                    del self.cache[next(iter(self.cache))]
                part = slice(k * CHUNK, min(self.n, (k + 1) * CHUNK))
                self.cache[k] = dumps(self.scene.samples({name: col[part] for name, col in self.columns.items()}))
            return self.cache[k]
