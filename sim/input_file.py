"""The one way an input file is read: a regular file of a bounded size, checked before anything is read, so
that no file name (``/dev/zero``, a FIFO, a huge file) can hang a command or exhaust its memory. It lives in
``sim`` because every layer reads input files and imports only go sim <- drivers <- hil."""
from __future__ import annotations

import os
import stat
from os import PathLike

from sim.errors import UserInputError

__all__ = ["MAX_TEXT_FILE_BYTES", "MAX_TABLE_FILE_BYTES", "InputFileError", "read_input_file"]

#: Largest config, sweep, state or parameter file read: far above any real one, small enough to hold in memory.
MAX_TEXT_FILE_BYTES = 1024 * 1024

#: Largest table of samples read (an excitation playback CSV): hours of samples, still held in memory.
MAX_TABLE_FILE_BYTES = 256 * 1024 * 1024


class InputFileError(UserInputError, ValueError):
    """An input file refused before it is read: not a regular file, or too large."""

    def __init__(self, path: str | PathLike, reason: str):
        self.path = str(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


def _open_regular(path: str | PathLike, max_bytes: int | None) -> tuple[int, int]:
    """(descriptor, size) of a regular file of at most ``max_bytes``. Opened without blocking, so a FIFO
    without a writer is refused instead of waiting for one; a device or directory is refused unread."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(path, "is a directory" if stat.S_ISDIR(st.st_mode) else
                                 "is not a regular file (a device, FIFO or socket); nothing was read")
        if max_bytes is not None and st.st_size > max_bytes:
            raise InputFileError(path, f"is {st.st_size} bytes; at most {max_bytes} are read")
        return fd, st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_input_file(path: str | PathLike, max_bytes: int | None = MAX_TEXT_FILE_BYTES) -> bytes:
    """The bytes of a regular file of at most ``max_bytes`` (None: no cap beyond the file's size), checked
    before anything is read: the one way inputs are read, so that no file name (``/dev/zero``, a FIFO, a
    huge file) can hang a command or exhaust its memory.

    Raises:
        InputFileError: not a regular file, or larger than ``max_bytes`` (also one that grows past it).
        OSError: the file cannot be opened or read.
    """
    fd, size = _open_regular(path, max_bytes)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(size + 1)       # a read allocates what it asks for: the size found, not the cap
    if max_bytes is not None and len(data) > max_bytes:
        raise InputFileError(path, f"is larger than {max_bytes} bytes")
    return data
