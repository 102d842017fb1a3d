"""C3D marker files, read with ezc3d in a child process.

ezc3d is native code: some damaged files make it crash the process that reads them (a segmentation fault on a
C3D whose parameter section lost a few bytes), and a damaged header can make it allocate without bound. So the
file is read by a short-lived Python child (:data:`CHILD`, at most :data:`CHILD_MEMORY_BYTES` of address space and
:data:`CHILD_TIMEOUT_S`, more for a larger file), which hands back the labels, units, rate, first frame and points as an .npz; whatever
happens to the child, the caller gets a :class:`sim.motion.data.MotionFileError` line. Reads are cached by file
(path, size, modification time), so an environment that resets onto the same reference reads it once.
"""
from __future__ import annotations

import functools
import importlib.util
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from sim.motion.data import LENGTH_UNITS, Motion, MotionFileError, file_status

CHILD_TIMEOUT_S = 10.0
"""Longest a child may take to read a small file; a larger one gets :data:`CHILD_SECONDS_PER_BYTE` more per byte
(*proposals*: ezc3d reads a file at well over 10 MB/s; a damaged 4 kB file made it loop until it was stopped)."""
CHILD_SECONDS_PER_BYTE = 1e-7
CHILD_MEMORY_BYTES = 4 << 30
"""The child's address-space limit (*proposal*: 4 GiB, enough for the largest file read, 1 GiB, as float64)."""
CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[3]), int(sys.argv[3])))
try:
    import ezc3d
    import numpy as np
    c3d = ezc3d.c3d(sys.argv[1])
    point = c3d["parameters"]["POINT"]
    np.savez(sys.argv[2], labels=np.array([str(s).strip() for s in point["LABELS"]["value"]], dtype=str),
             units=np.array(str(point["UNITS"]["value"][0]).strip() if point["UNITS"]["value"] else ""),
             rate=np.array(float(point["RATE"]["value"][0])),
             first=np.array(int(c3d["header"]["points"]["first_frame"])),
             points=np.asarray(c3d["data"]["points"], np.float64))
except BaseException as exc:
    text = str(exc).strip().splitlines()
    sys.stderr.write((text[0][:120] if text else type(exc).__name__) + "\\n")
    sys.exit(1)
"""
"""What the child runs: ezc3d's read of argv[1], saved as the .npz argv[2], under the address-space limit argv[3]."""


def read_c3d(path: str | os.PathLike) -> Motion:
    """A C3D file's 3-D points (markers); time from ``POINT:RATE`` and the first frame; ``POINT:UNITS`` to m."""
    path = Path(path)
    if importlib.util.find_spec("ezc3d") is None:      # optional (the `motion` extra); only the child loads it
        raise MotionFileError(f"{path}: reading C3D needs ezc3d (pip install 'fes-hil[motion]')")
    st = file_status(path)
    return _read_cached(str(path.resolve()), st.st_size, st.st_mtime_ns, str(path))


@functools.lru_cache(maxsize=8)
def _read_cached(resolved: str, size: int, mtime_ns: int, shown: str) -> Motion:
    """The motion of one version of a file (read-only arrays: the cache shares them)."""
    path = Path(shown)
    c3d_complete(path, size)
    fields = _child_read(path, CHILD_TIMEOUT_S + size * CHILD_SECONDS_PER_BYTE)
    labels, units = [str(s) for s in fields["labels"]], str(fields["units"])
    rate, first, pts = float(fields["rate"]), int(fields["first"]), fields["points"]
    if units not in LENGTH_UNITS:
        raise MotionFileError(f"{path}: POINT:UNITS={units!r}; known: {', '.join(LENGTH_UNITS)}")
    if not (np.isfinite(rate) and rate > 0.0):
        raise MotionFileError(f"{path}: POINT:RATE={rate!r}; a frame rate is > 0 Hz")
    if pts.ndim != 3 or pts.shape[1] != len(labels) or not labels:
        raise MotionFileError(f"{path}: {len(labels)} point labels for points of shape {pts.shape}")
    xyz = np.ascontiguousarray(np.transpose(pts[:3], (2, 1, 0)) * LENGTH_UNITS[units])
    motion = Motion(str(path), (first + np.arange(xyz.shape[0])) / rate, tuple(labels), xyz)
    motion.time.setflags(write=False)
    motion.values.setflags(write=False)
    return motion


def _child_read(path: Path, timeout_s: float) -> dict:
    """ezc3d's read of ``path`` in a child process of at most ``timeout_s`` (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="hil-c3d-") as tmp:
        out = Path(tmp) / "points.npz"
        try:
            done = subprocess.run([sys.executable, "-c", CHILD, str(path), str(out), str(CHILD_MEMORY_BYTES)],
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise MotionFileError(f"{path}: not a readable C3D file (reading it took over {timeout_s:.3g} s)") \
                from None
        if done.returncode < 0:
            raise MotionFileError(f"{path}: not a readable C3D file (the C3D reader, ezc3d, crashed on it: "
                                  f"signal {-done.returncode})")
        if done.returncode != 0:
            reason = (done.stderr.strip().splitlines() or ["no reason given"])[-1][:120]
            raise MotionFileError(f"{path}: not a readable C3D file ({reason})")
        with np.load(out, allow_pickle=False) as data:
            return {key: data[key] for key in data.files}


def c3d_complete(path: Path, size: int) -> None:
    """Refuse a C3D file shorter than its header's frames need (ezc3d reads a cut file without a word). Header
    words (16-bit, C3D.org "The C3D File Format User Guide", Motion Lab Systems 2008, ch. 3): 1 parameter block,
    2 points, 3 analog values per frame, 4/5 first/last frame, 7-8 scale (< 0: float data), 9 data block; the
    parameter section's 4th byte gives the processor (84 Intel, 85 DEC, 86 MIPS big-endian)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(512)
            fh.seek(max(head[0] - 1, 0) * 512 + 3 if len(head) == 512 else 0)
            processor = fh.read(1)
    except OSError as exc:
        raise MotionFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if len(head) < 512 or head[1] != 0x50 or not processor:
        raise MotionFileError(f"{path}: not a readable C3D file (no C3D header)")
    if processor[0] not in (84, 86):
        return                                  # DEC floats: scale sign not read here; ezc3d checks the rest
    order = "<" if processor[0] == 84 else ">"
    points, analog, first, last = struct.unpack_from(order + "4H", head, 2)
    scale, = struct.unpack_from(order + "f", head, 12)
    data_block, = struct.unpack_from(order + "H", head, 16)
    word = 4 if scale < 0 else 2
    need = (data_block - 1) * 512 + max(last - first + 1, 0) * (points * 4 + analog) * word
    if size < need:
        raise MotionFileError(f"{path}: not a readable C3D file (cut off: {size} bytes, its {last - first + 1} "
                              f"frames need {need})")
