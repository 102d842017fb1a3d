"""One writer at a time in numba's cache: processes that compile at once (a lab's `hil serve` and a user's
`hil simulate` on a fresh install, the test workers) keep every cache entry they write.

numba saves a compiled function as: read the function's index (signature -> data file), add the new entry
under the first free data-file number, write the index, write the data file (``IndexDataCacheFile.save``),
with no lock. Two processes saving different signatures of one function at once both read the old index,
both take number 1, and one index entry ends up naming the other's machine code. :func:`lock_cache_saves`
wraps that save in an exclusive ``flock`` on :data:`LOCK_NAME` in the cache directory, so the second writer
reads the index the first one wrote. Loads take no lock: numba replaces index and data files atomically
(write to a temporary name, then rename), and a load that finds an entry without its data compiles afresh.
A save that fails (a full disk) leaves the kernel compiled in memory and prints one warning, where numba would
raise the error from the kernel's first call.
"""
from __future__ import annotations

import fcntl
import importlib.abc
import importlib.util
import os
import sys
from contextlib import contextmanager

CACHING = "numba.core.caching"
LOCK_NAME = "save.lock"
"""The lock file in each numba cache directory (empty; only its flock matters)."""


@contextmanager
def exclusive(directory: str):
    """Hold an exclusive flock on ``directory/LOCK_NAME`` for the block; where the file cannot be opened
    (a read-only cache, which numba reports itself), run the block unlocked rather than fail the compile."""
    try:
        # read-only suffices for flock, so users sharing a cache (the service and a lab member) can each open a
        # lock file the other created
        fd = os.open(os.path.join(directory, LOCK_NAME), os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)                        # closing the last descriptor releases the flock


def lock_cache_saves() -> None:
    """Make every numba cache save in this process hold :func:`exclusive` on its cache directory: now if
    numba's cache module is loaded, else as soon as it is (a process that never compiles, such as the orphan
    watch, does not pay for importing numba)."""
    caching = sys.modules.get(CACHING)
    if caching is not None:
        _wrap_save(caching.IndexDataCacheFile)
    elif not any(isinstance(finder, _WrapOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())


def _wrap_save(cls) -> None:
    save = cls.save
    if getattr(save, "locked_by_fes_hil", False):
        return

    def locked_save(self, key, data):
        try:
            with exclusive(self._cache_path):
                save(self, key, data)
        except OSError as exc:
            _unsaved(self._cache_path, exc)

    locked_save.locked_by_fes_hil = True
    cls.save = locked_save


_WARNED: list[str] = []
"""The cache directory of this process's first failed save (one warning per process)."""


def _unsaved(directory: str, exc: OSError) -> None:
    """A kernel that compiled but could not be cached (a full disk, a quota) still runs: say so once per
    process on stderr, instead of failing the command that compiled it (numba would raise the OSError from
    the kernel's first call)."""
    if not _WARNED:
        _WARNED.append(directory)
        sys.stderr.write(f"warning: numba's cache {directory}: {exc.strerror or exc}; the kernels run but compile "
                         f"again in the next process\n")


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds numba's cache module with the other finders and wraps its save once the module has run."""

    def find_spec(self, name, path=None, target=None):
        if name != CACHING:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run_module = spec.loader.exec_module

        def exec_and_wrap(module):
            run_module(module)
            _wrap_save(module.IndexDataCacheFile)

        spec.loader.exec_module = exec_and_wrap
        return spec
