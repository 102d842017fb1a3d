"""Output files written whole or not at all.

A command's output (an export, an analysis table, a linearised model, a figure) is written to a temporary
file beside its final name, flushed to the disk, and renamed onto the name only when complete (a rename
within a directory is atomic). A write that fails part-way (a full disk, a quota, an I/O error) then leaves
no truncated file that reads as a complete one, the earlier file of that name, if any, stays as it was, and
the error names the output being written rather than the temporary file or no file at all (a full disk's
``[Errno 28]`` carries no name).

:func:`append_line` adds one line to a log (a sweep's ``results.jsonl``) the same way: whole, or cut back off.
:func:`create_with_start` creates a file that is appended to while others may read it (a run's recording): its
name appears with its start (the header) already in it.

A name that exists but is not a regular file (``/dev/null``, ``/dev/stdout``, a FIFO) is written in place:
renaming onto it would replace the device or pipe with a file. A symbolic link is followed, so the file it
points to is replaced and the link kept. A replaced file keeps its permissions.
"""
from __future__ import annotations

import errno
import os
import stat
from contextlib import contextmanager
from os import PathLike
from pathlib import Path


@contextmanager
def output_file(path: str | PathLike, mode: str = "w", **open_kwargs):
    """``open(path, mode, **open_kwargs)`` for writing, made whole-or-nothing as the module says; yields the
    file object. Any OSError leaves as one naming ``path``."""
    if "w" not in mode or "+" in mode:
        raise ValueError(f"output_file writes a new file (mode 'w' or 'wb'), not {mode!r}")
    target = Path(os.path.realpath(path))
    if _exists_as_other_than_a_file(target):
        with _named(path, target), open(target, mode, **open_kwargs) as fh:
            yield fh
        return
    partial = _partial_name(target)
    try:
        with _named(path, partial), open(partial, mode, **open_kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())                 # a full disk may report only here (delayed allocation)
        with _named(path, partial):
            _keep_mode(target, partial)
            os.replace(partial, target)
    finally:
        if partial.exists():
            partial.unlink()


def _partial_name(target: Path) -> Path:
    """The temporary name beside ``target`` that this process writes it under (hidden, and not ``*.json``)."""
    return target.with_name(f".{target.name}.partial-{os.getpid()}")


def _keep_mode(target: Path, partial: Path) -> None:
    """The permissions of the file being replaced (a user's 0600 on a patient's data), not the umask's."""
    try:
        mode = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        return
    os.chmod(partial, mode)


def _exists_as_other_than_a_file(target: Path) -> bool:
    try:
        return not stat.S_ISREG(target.stat().st_mode)
    except FileNotFoundError:
        return False


@contextmanager
def _named(path, written: Path):
    """Re-raise an OSError of the file being ``written`` (naming it, or no file: a write's error) as the same
    error naming ``path``; an error naming another file (an input read inside the block) passes unchanged."""
    try:
        yield
    except OSError as exc:
        if exc.errno is None or exc.filename not in (None, str(written)):
            raise
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None


def write_output_text(path: str | PathLike, text: str) -> None:
    """``text`` as the whole UTF-8 file ``path``, through :func:`output_file`."""
    with output_file(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def append_line(path: str | PathLike, line: str) -> None:
    """Append ``line`` (ending in a newline) to the log ``path`` whole or not at all, on the disk when this
    returns (fsync). A write that fails part-way (a full disk) is cut back off, so the next line appended, after
    the user has made room, does not join a torn one; the error names ``path``. A last line torn by a killed
    writer is ended first, so this line stays whole."""
    data = line.encode("utf-8")
    with _named(path, Path(path)):
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            end = os.fstat(fd).st_size
            if end and os.pread(fd, 1, end - 1) != b"\n":
                data = b"\n" + data
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, end)
                raise
        finally:
            os.close(fd)


#: A file system that cannot hard-link (vfat, some network and FUSE mounts) answers ``link`` with one of these.
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK}


def create_with_start(path: str | PathLike, start: bytes):
    """A new file ``path``, opened for binary writing after ``start``, that appears under its name with ``start``
    already on the disk, so a reader who opens it as soon as it exists never sees its start cut short. An
    existing name is refused (FileExistsError), as ``open(path, "xb")`` does.

    ``start`` is written to a temporary file beside the name and fsynced, then hard-linked to the name (``link``
    refuses an existing name atomically, like ``O_EXCL``) and the temporary name removed. Where the file system
    cannot hard-link, the file is created in place, as ``open(path, "xb")`` would. Errors name ``path``."""
    target = Path(path)
    partial = _partial_name(target)
    try:
        with _named(path, partial):
            fh = _opened_with(partial, "wb", start)     # a name of this process's: any file there is a stale one
        try:
            linked = _linked(partial, target)
        except BaseException:
            fh.close()
            raise
        if linked:
            return fh
        fh.close()
    finally:
        partial.unlink(missing_ok=True)
    with _named(path, target):
        return _opened_with(path, "xb", start)


def _linked(partial: Path, target: Path) -> bool:
    """``partial`` given the name ``target``; False where the file system has no hard links."""
    try:
        os.link(partial, target)
    except OSError as exc:
        if exc.errno in _NO_HARD_LINKS:
            return False
        raise type(exc)(exc.errno, exc.strerror, str(target)) from None
    return True


def _opened_with(path, mode: str, start: bytes):
    """``path`` opened with ``mode``, ``start`` written to it and on the disk (fsync); closed again if that fails."""
    fh = open(path, mode)
    try:
        fh.write(start)
        fh.flush()
        os.fsync(fh.fileno())
    except BaseException:
        _close_quietly(fh)
        raise
    return fh


def _close_quietly(fh) -> None:
    """Close a file whose write failed: closing flushes its buffer again, whose error would replace the first."""
    try:
        fh.close()
    except OSError:
        pass
