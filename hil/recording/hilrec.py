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
import math
import os
import signal
import struct
import time
from dataclasses import dataclass

import numpy as np
from isal.isal_zlib import crc32

from drivers.core.contract import COMMAND_DTYPE, KIND_TICK_STALL
from drivers.ipc.process import die_with_parent
from drivers.ipc.shm_ring import ShmRing
from sim.errors import UserInputError
from sim.input_file import InputFileError, read_input_file
from sim.output_file import create_with_start, output_file

MAGIC = b"FESHILREC1\n"
BLOCK_MAGIC = b"BLK1"
_BLOCK_HEAD = struct.Struct("<4sHI")

#: Bounds of a recording's header, checked before it is used: its JSON, its streams, one record of a stream.
MAX_HEADER_BYTES = 64 * 1024 * 1024
MAX_STREAMS = 256
MAX_RECORD_BYTES = 16 * 1024 * 1024


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


def encode_header(raw: bytes) -> bytes:
    """The start of a recording: the magic, the header's length, its JSON bytes ``raw`` and their CRC."""
    return MAGIC + struct.pack("<I", len(raw)) + raw + struct.pack("<I", crc32(raw))


def _read_file(path: str) -> bytes:
    """The recording's bytes: a regular file (a device or FIFO is refused unread) of at most half this
    computer's memory (its streams are copied out of it)."""
    cap = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    try:
        return read_input_file(path, cap)
    except InputFileError as exc:
        raise RecordingError(f"{path}: {exc.reason}") from None
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except MemoryError:
        raise RecordingError(f"{path}: too large to read into this computer's free memory") from None


def _parse_header(path: str, raw: bytes) -> dict:
    """The header's JSON object, checked to have a ``streams`` list before anything else reads it."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise RecordingError(f"{path}: header is not UTF-8 (byte {exc.start})") from None
    except (ValueError, RecursionError) as exc:
        raise RecordingError(f"{path}: header is not valid JSON ({type(exc).__name__})") from None
    if not isinstance(doc, dict):
        raise RecordingError(f"{path}: header is a JSON {type(doc).__name__}, not an object")
    if not isinstance(doc.get("streams"), list) or not 1 <= len(doc["streams"]) <= MAX_STREAMS:
        raise RecordingError(f"{path}: header has no list of 1..{MAX_STREAMS} 'streams'")
    return doc


def _stream_dtypes(path: str, streams: list) -> dict[str, np.dtype]:
    """Each stream's record dtype from the header: a unique name, a plain (no Python objects) dtype of 1 to
    MAX_RECORD_BYTES bytes."""
    out: dict[str, np.dtype] = {}
    for i, s in enumerate(streams):
        if not isinstance(s, dict) or not isinstance(s.get("name"), str) or s["name"] in out:
            raise RecordingError(f"{path}: header stream {i} has no name of its own")
        try:
            dt = _dtype(s.get("descr"))
        except (TypeError, ValueError, KeyError, IndexError, RecursionError):
            raise RecordingError(f"{path}: header stream {s['name']!r} has no valid record type") from None
        if dt.hasobject or not 1 <= dt.itemsize <= MAX_RECORD_BYTES:
            raise RecordingError(f"{path}: header stream {s['name']!r}: a record of {dt.itemsize} bytes"
                                 f"{' holding Python objects' if dt.hasobject else ''}; records are 1.."
                                 f"{MAX_RECORD_BYTES} bytes of numbers")
        out[s["name"]] = dt
    return out


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
            self.fh = create_with_start(self.path, encode_header(raw))   # a live reader never sees half a header
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
        data = _read_file(self.path)
        if not data.startswith(MAGIC):
            raise RecordingError(f"{self.path}: not a fes-hil recording (bad magic)")
        pos = len(MAGIC)
        if len(data) < pos + 4:
            raise RecordingError(f"{self.path}: header is cut off")
        (n,) = struct.unpack_from("<I", data, pos)
        if n > MAX_HEADER_BYTES:
            raise RecordingError(f"{self.path}: header of {n} bytes; at most {MAX_HEADER_BYTES}")
        raw = data[pos + 4: pos + 4 + n]
        if len(raw) != n or len(data) < pos + 8 + n or \
                struct.unpack_from("<I", data, pos + 4 + n)[0] != crc32(raw):
            raise RecordingError(f"{self.path}: header is corrupt or cut off")
        self.header = _parse_header(self.path, raw)
        self.streams = _stream_dtypes(self.path, self.header["streams"])
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


#: What a run's header holds for the commands that read a recording (besides ``streams``), by type.
RUN_HEADER_TYPES = {"config": dict, "config_path": str, "model_data_sha256": str, "start_time_utc": str,
                    "period_s": (int, float), "dof_names": list, "muscle_names": list, "channel_names": list}
MAX_NAMES = 4096
"""Most DOF, muscle or channel names a run header may list."""


def read_run_recording(path: str) -> RecordingReader:
    """A run's recording (``hil replay``, ``export``, ``report`` and ``view``), its header checked against
    RUN_HEADER_TYPES and its ``ticks`` and ``commands`` streams against the fields those commands read,
    before any of them uses it."""
    reader = RecordingReader(path)
    problem = run_header_problem(reader.header, reader.streams)
    if problem:
        raise RecordingError(f"{path}: not a run recording: {problem}")
    return reader


def run_header_problem(header: dict, streams: dict[str, np.dtype]) -> str | None:
    """What is wrong with a run's header and record types (None: nothing)."""
    for key, kind in RUN_HEADER_TYPES.items():
        if isinstance(header.get(key), bool) or not isinstance(header.get(key), kind):
            return f"header key {key!r} is missing or not a {getattr(kind, '__name__', 'number')}"
    for key in ("dof_names", "muscle_names", "channel_names"):
        if len(header[key]) > MAX_NAMES or not all(isinstance(n, str) for n in header[key]):
            return f"header key {key!r} is not a list of at most {MAX_NAMES} names"
    if not (math.isfinite(header["period_s"]) and 0.0 < header["period_s"] <= 1.0):
        return f"header period_s = {header['period_s']!r}; a tick period is in (0, 1] s"
    for name in CORE_STREAMS:
        if name not in streams:
            return f"no {name!r} stream"
    ticks, n_channels = streams["ticks"], max(len(header["channel_names"]), 1)
    if "frame" not in (ticks.names or ()) or ticks["frame"].names is None:
        return "stream 'ticks' has no structured field 'frame'"
    return (_fields_problem("ticks", ticks, {
        **dict.fromkeys(("tick", "start_ns", "lateness_ns", "compute_ns", "skipped_deadlines"), ("iu", ())),
        "applied": ("f", (n_channels, 4)), "u": ("f", (len(header["muscle_names"]),))})
        or _fields_problem("ticks.frame", ticks["frame"], {
            "time": ("f", ()), "q": ("f", (len(header["dof_names"]),)), "th_angles": ("f", (3,)),
            "gh_force": ("f", (3,)), "gh_stability": ("f", ()), "elbow_flexion": ("f", ()), "status": ("iu", ())})
        or _fields_problem("commands", streams["commands"], {
            **dict.fromkeys(("tick", "receive_ns", "driver", "kind", "status", "index"), ("iu", ())),
            "values": ("f", (4,))}))


def _fields_problem(stream: str, dtype: np.dtype, fields: dict) -> str | None:
    """The first of ``fields`` (name -> (numpy kinds, shape)) that ``dtype`` lacks or has otherwise."""
    for name, (kinds, shape) in fields.items():
        if dtype.names is None or name not in dtype.names:
            return f"stream {stream!r} has no field {name!r}"
        field = dtype[name]
        if field.base.kind not in kinds or field.shape != shape or field.base.names is not None:
            return f"stream {stream!r} field {name!r} is {field.base.str} of shape {field.shape}, not {shape}"
    return None


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


def run_recorder(spec: RecorderSpec, parent_pid: int, stall_cell, conn) -> None:
    """Process target: drain the rings into the file until they are closed and empty or the parent dies;
    always drains, flushes and closes before exiting. SIGTERM is ignored (a stop of the whole process
    group must not end the recording before the loop's last tick): the parent closes the rings, and its
    death sends SIGUSR1 (PR_SET_PDEATHSIG).

    ``stall_cell``: (shared array, index of stall_s, index of stall_tick) of the run's status block
    (:class:`hil.service.build.RunStatus`) or None; when stall_s is non-zero at the end, the run stalled, and a
    KIND_TICK_STALL command record, written last, says so.

    Start-up answers on ``conn`` (:func:`drivers.ipc.process.start_helper`): ``("ready", None)`` once the
    file is created, ``("error", message)`` if it cannot be. A write that fails later (disk full, I/O
    error) is reported as ``("failed", message)`` and ends the recorder with exit code 1; the producer
    counts what was not written from the rings' AUX_WRITTEN words."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    stop = {"now": False}
    signal.signal(signal.SIGUSR1, lambda *_: stop.update(now=True))
    if not die_with_parent(parent_pid, signal.SIGUSR1, name="hil-recorder"):
        return
    rings = {name: ShmRing.attach(shm, _dtype(descr), cap) for name, (shm, descr, cap) in spec.rings.items()}
    writer = None
    try:
        writer = RecordingWriter(spec.path, spec.header, {n: r.dtype for n, r in rings.items()})
        conn.send(("ready", None))
        _drain_until_done(spec, rings, writer, parent_pid, stop)
        if stall_cell is not None and stall_cell[0][stall_cell[1]] > 0:
            values, s, t = stall_cell
            write_stall_record(writer, int(values[t]), float(values[s]))
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


def write_stall_record(writer: RecordingWriter, tick: int, stall_s: float) -> None:
    """The command record that ends a stalled run's file: ``tick``, the tick in which the loop stalled."""
    rec = np.zeros(1, COMMAND_DTYPE)
    rec["tick"], rec["receive_ns"], rec["kind"], rec["index"] = tick, time.monotonic_ns(), KIND_TICK_STALL, -1
    rec["values"][0, 0] = stall_s
    writer.append("commands", rec)
    writer.flush()


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
    """One row per tick, each column named with its unit: tick, t_s, q_<dof>_rad, gh_stability, status (the
    frame's status bits, ``drivers.core.contract.STATUS_BITS``), u_<muscle> (excitation 0..1; these three are
    unitless), and per channel the applied <channel>_pw_us, _amp_ma and _freq_hz; a run with a voluntary source
    (``hil.rt.voluntary``) adds the patient's own drive, u_voluntary_<muscle>, last. Returns the number of rows."""
    ticks = reader.read("ticks")
    frame = ticks["frame"]
    cols = ["tick", "t_s", *[f"q_{d}_rad" for d in dof_names], "gh_stability", "status",
            *[f"u_{m}" for m in muscle_names]]
    for ch in channel_names:
        cols += [f"{ch}_pw_us", f"{ch}_amp_ma", f"{ch}_freq_hz"]
    voluntary = [ticks["u_voluntary"]] if "u_voluntary" in ticks.dtype.names else []
    cols += [f"u_voluntary_{m}" for m in muscle_names] if voluntary else []
    table = np.column_stack([ticks["tick"].astype(float), frame["time"], frame["q"], frame["gh_stability"],
                             frame["status"].astype(float), ticks["u"], *[ticks["applied"][:, c, :3] for c in range(len(channel_names))],
                             *voluntary])
    with output_file(out_path, "w", encoding="utf-8") as fh:
        fh.write(",".join(cols) + "\n")
        np.savetxt(fh, table, delimiter=",", fmt="%.17g")
    return table.shape[0]


CORE_STREAMS = ("ticks", "commands")
"""The streams every recording has; the others are the drivers' (``drivers.core.interface`` rule 7)."""


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
        with output_file(path, "w", encoding="utf-8") as fh:
            fh.write(",".join(dtype.names) + "\n")
            np.savetxt(fh, table, delimiter=",", fmt="%.17g")
        written[path] = len(rows)
    return written
