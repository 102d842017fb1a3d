"""Run recordings: an append-only, crash-tolerant binary format, its reader, and the recorder process.

File layout (little-endian):

    b"FESHILREC1\\n"                      magic (11 bytes)
    uint32 n, n bytes UTF-8 JSON, uint32 CRC32(JSON)   header: run metadata + "streams":
                                          [{"name": ..., "descr": numpy dtype descr}, ...]
    blocks, each:
    b"BLK1", uint16 stream, uint32 count, count * itemsize bytes, uint32 CRC32(stream, count, payload)

Only whole, CRC-checked blocks are ever read back. After a crash the file simply ends inside (or after)
a block: the reader returns every complete block and reports ``truncated``. Corruption in the middle
stops reading there, with a warning. The recorder writes a block per stream whenever it drains its
rings (every ~50 ms), hands it to the OS at once and fsyncs at least every 0.5 s, so a SIGKILL of the
recorder loses no record it has drained, and a SIGKILL of the real-time process loses nothing that
reached the ring (the recorder notices its parent is gone, drains and closes). The recorder counts in
each ring what it has handed to the OS, so the real-time process knows exactly how many records a dead
or failing recorder did not write (:func:`run_recorder`). Each drain writes the ``commands`` block
before the ``ticks`` block it belongs to, so wherever a file is cut, every tick it holds comes with all
of its commands and the part that is left replays bit-identically.

The checksums are zlib's CRC-32, computed by ISA-L (python-isal), which gives the same values as
``zlib.crc32`` several times faster on a megabyte block (carry-less multiply instructions).
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import time
from dataclasses import dataclass

import numpy as np
from isal.isal_zlib import crc32

from sim.errors import UserInputError

MAGIC = b"FESHILREC1\n"
BLOCK_MAGIC = b"BLK1"
_BLOCK_HEAD = struct.Struct("<4sHI")


class RecordingError(UserInputError):
    """A recording that cannot be written or read; the message names the file and the reason."""


def dtype_descr(dtype: np.dtype):
    return np.lib.format.dtype_to_descr(np.dtype(dtype))


def _dtype(descr) -> np.dtype:
    def fix(d):  # JSON turns tuples into lists
        if isinstance(d, list):
            return [tuple(fix(x) if isinstance(x, list) else x for x in item) if isinstance(item, list) else item
                    for item in d]
        return d
    return np.lib.format.descr_to_dtype(fix(descr))


class RecordingWriter:
    """Writes a header and appends CRC-protected blocks of records, one stream per record dtype."""

    def __init__(self, path: str, header: dict, streams: dict[str, np.dtype]) -> None:
        self.path = str(path)
        self.streams = {name: np.dtype(dt) for name, dt in streams.items()}
        self.index = {name: i for i, name in enumerate(self.streams)}
        doc = dict(header)
        doc["streams"] = [{"name": n, "descr": dtype_descr(dt)} for n, dt in self.streams.items()]
        raw = json.dumps(doc, default=str).encode()
        try:
            self.fh = open(self.path, "xb")
            self.fh.write(MAGIC + struct.pack("<I", len(raw)) + raw + struct.pack("<I", crc32(raw)))
        except OSError as exc:
            raise RecordingError(f"{self.path}: cannot write recording: {exc.strerror or exc}") from exc
        self.flush()

    def append(self, stream: str, records: np.ndarray) -> None:
        if records.shape[0] == 0:
            return
        idx = self.index[stream]
        # the records' own memory, not a bytes copy (or two): a block of ticks is megabytes
        payload = memoryview(np.ascontiguousarray(records, dtype=self.streams[stream]).reshape(-1).view(np.uint8))
        head = _BLOCK_HEAD.pack(BLOCK_MAGIC, idx, records.shape[0])
        crc = crc32(payload, crc32(head[4:]))
        with self._write_errors():
            self.fh.write(head)
            self.fh.write(payload)
            self.fh.write(struct.pack("<I", crc))

    @contextlib.contextmanager
    def _write_errors(self):
        """An OSError of a write, flush or fsync as a RecordingError naming the file."""
        try:
            yield
        except OSError as exc:
            raise RecordingError(f"{self.path}: write failed: {exc.strerror or exc}") from exc

    def hand_to_os(self) -> None:
        """Write Python's buffer to the file (what survives this process's death, not a power loss)."""
        with self._write_errors():
            self.fh.flush()

    def flush(self) -> None:
        """Buffer to the OS, and the OS to the disk (fsync)."""
        self.hand_to_os()
        with self._write_errors():
            os.fsync(self.fh.fileno())

    def close(self) -> None:
        if not self.fh.closed:
            self.flush()
            self.fh.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class RecordingReader:
    """Reads a recording; tolerates a torn tail (``truncated``) and stops at corruption (``warnings``)."""

    def __init__(self, path: str) -> None:
        self.path = str(path)
        self.truncated = False
        self.warnings: list[str] = []
        try:
            with open(self.path, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            raise RecordingError(f"{self.path}: cannot read: {exc.strerror or exc}") from exc
        if not data.startswith(MAGIC):
            raise RecordingError(f"{self.path}: not a fes-hil recording (bad magic)")
        pos = len(MAGIC)
        if len(data) < pos + 4:
            raise RecordingError(f"{self.path}: header is cut off")
        (n,) = struct.unpack_from("<I", data, pos)
        raw = data[pos + 4: pos + 4 + n]
        if len(raw) != n or len(data) < pos + 8 + n or \
                struct.unpack_from("<I", data, pos + 4 + n)[0] != crc32(raw):
            raise RecordingError(f"{self.path}: header is corrupt or cut off")
        self.header = json.loads(raw)
        self.streams = {s["name"]: _dtype(s["descr"]) for s in self.header["streams"]}
        names = list(self.streams)
        chunks: dict[str, list[bytes]] = {name: [] for name in names}
        pos += 8 + n
        while pos < len(data):
            if len(data) - pos < _BLOCK_HEAD.size:
                self.truncated = True
                break
            magic, idx, count = _BLOCK_HEAD.unpack_from(data, pos)
            if magic != BLOCK_MAGIC or idx >= len(names):
                self.warnings.append(f"corrupt block header at byte {pos}; stopped reading there")
                break
            size = count * self.streams[names[idx]].itemsize
            end = pos + _BLOCK_HEAD.size + size + 4
            if end > len(data):
                self.truncated = True
                break
            payload = data[pos + _BLOCK_HEAD.size: end - 4]
            crc = crc32(payload, crc32(data[pos + 4: pos + _BLOCK_HEAD.size]))
            if struct.unpack_from("<I", data, end - 4)[0] != crc:
                if end == len(data):
                    self.truncated = True
                else:
                    self.warnings.append(f"CRC mismatch in block at byte {pos}; stopped reading there")
                break
            chunks[names[idx]].append(payload)
            pos = end
        if self.truncated:
            self.warnings.append("the recording ends inside a block (the run was killed); the incomplete "
                                 "block was ignored")
        self._data = {name: np.frombuffer(b"".join(parts), dtype=self.streams[name])
                      for name, parts in chunks.items()}

    def read(self, stream: str) -> np.ndarray:
        return self._data[stream]


# ----------------------------------------------------------------------------------------------
# recorder process

@dataclass(frozen=True)
class RecorderSpec:
    path: str
    header: dict
    rings: dict            # stream name -> (shm name, dtype descr, capacity)
    poll_s: float = 0.05
    flush_s: float = 0.5


#: aux word of each recording ring in which the recorder counts the records handed to the OS (a record
#: counted there survives the recorder's death; the producer compares it with what it pushed)
AUX_WRITTEN = 0


def run_recorder(spec: RecorderSpec, parent_pid: int, conn) -> None:
    """Process target: drain the rings into the file until they are closed and empty, the parent dies,
    or SIGTERM; always drains, flushes and closes before exiting.

    Start-up answers on ``conn`` (:func:`drivers.process.start_helper`): ``("ready", None)`` once the
    file is created, ``("error", message)`` if it cannot be. A write that fails later (disk full, I/O
    error) is reported as ``("failed", message)`` and ends the recorder with exit code 1; the producer
    counts what was not written from the rings' AUX_WRITTEN words."""
    from drivers.process import die_with_parent
    from drivers.shm_ring import ShmRing

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    if not die_with_parent(parent_pid, name="hil-recorder"):
        return
    rings = {name: ShmRing.attach(shm, _dtype(descr), cap) for name, (shm, descr, cap) in spec.rings.items()}
    writer = None
    try:
        writer = RecordingWriter(spec.path, spec.header, {n: r.dtype for n, r in rings.items()})
        conn.send(("ready", None))
        _drain_until_done(spec, rings, writer, parent_pid, stop)
    except RecordingError as exc:
        conn.send(("error" if writer is None else "failed", str(exc)))
        raise SystemExit(1) from None
    finally:
        if writer is not None:
            with contextlib.suppress(OSError):
                writer.fh.close()    # already flushed, or failing: never raise from here
        orphaned = os.getppid() != parent_pid  # the creator died: nobody else will unlink the rings
        for r in rings.values():
            r.owner = r.owner or orphaned
            r.release()


def _drain_until_done(spec: RecorderSpec, rings: dict, writer: RecordingWriter, parent_pid: int, stop) -> None:
    """Pop in the spec's order (ticks, then commands and the drivers' streams) and write in reverse. The loop
    pushes a tick's commands and driver rows before its tick record, so every one of a popped tick is popped
    too, and in the file every tick record comes after all of its commands: a recording cut anywhere (SIGKILL, power loss)
    never holds a tick whose commands are missing, and replays bit-identically."""
    last_sync = time.monotonic()

    def drain() -> None:
        batches = [(name, ring.pop_available()) for name, ring in rings.items()]
        for name, records in reversed(batches):
            writer.append(name, records)
        writer.hand_to_os()
        for name, records in batches:
            rings[name].aux[AUX_WRITTEN] += records.shape[0]

    while True:
        drain()
        if time.monotonic() - last_sync >= spec.flush_s:
            writer.flush()
            last_sync = time.monotonic()
        finished = all(r.closed for r in rings.values()) and not any(r.pending for r in rings.values())
        if finished or stop["now"] or os.getppid() != parent_pid:
            drain()
            writer.flush()
            return
        time.sleep(spec.poll_s)


def export_csv(reader: RecordingReader, out_path: str, muscle_names, dof_names, channel_names) -> int:
    """One row per tick: tick, time, the DOFs (rad), gh_stability, status (the frame's status bits,
    ``drivers.contract.STATUS_BITS``), u_<muscle>, and per channel the applied pulse width (us), amplitude
    (mA) and frequency (Hz). Returns the number of rows."""
    ticks = reader.read("ticks")
    frame = ticks["frame"]
    cols = ["tick", "time", *dof_names, "gh_stability", "status", *[f"u_{m}" for m in muscle_names]]
    for ch in channel_names:
        cols += [f"{ch}_pw_us", f"{ch}_amp_ma", f"{ch}_freq_hz"]
    table = np.column_stack([ticks["tick"].astype(float), frame["time"], frame["q"], frame["gh_stability"],
                             frame["status"].astype(float), ticks["u"], *[ticks["applied"][:, c, :3] for c in range(len(channel_names))]])
    with open(out_path, "w", encoding="utf-8") as fh:
        fh.write(",".join(cols) + "\n")
        np.savetxt(fh, table, delimiter=",", fmt="%.17g")
    return table.shape[0]


CORE_STREAMS = ("ticks", "commands")
"""The streams every recording has; the others are the drivers' (``drivers.base`` rule 7)."""


def export_driver_streams(reader: RecordingReader, csv_path: str) -> dict[str, int]:
    """Each driver stream (``controller<i>``: a plug-in's state after each of its calls) to
    ``<csv_path stem>.<stream>.csv``, one row per record with the stream's field names as columns.
    Returns path -> rows."""
    stem, _ = os.path.splitext(csv_path)
    written = {}
    for name, dtype in reader.streams.items():
        if name in CORE_STREAMS:
            continue
        rows = reader.read(name)
        path = f"{stem}.{name}.csv"
        table = np.column_stack([rows[f].astype(float) for f in dtype.names]) if len(rows) else \
            np.zeros((0, len(dtype.names)))
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(",".join(dtype.names) + "\n")
            np.savetxt(fh, table, delimiter=",", fmt="%.17g")
        written[path] = len(rows)
    return written
