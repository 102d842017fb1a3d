"""Where numba keeps the compiled kernels: a directory named after the source of every module that compiles one.

numba checks a cached function against its own file only. When an update changes a kernel in another file
(a callee the cached function was compiled with), the caller's cache would still load the old callee's
machine code: the plant would run a mix of old and new physics without a word. Naming the cache directory
after a hash of every kernel module's source starts a fresh cache whenever any compiled code changes.

The base directory is ``NUMBA_CACHE_DIR`` when set (the systemd unit sets it) and ``.numba-cache`` in the
project directory otherwise; the keyed directory goes below it. Only the newest few keyed directories are
kept. This runs from ``sim/__init__.py``, before any kernel is decorated (numba picks a function's cache
location when it is decorated); ``drivers`` and ``hil`` import ``sim`` first for the same reason.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
"""The project directory (this file is sim/jit/cache.py)."""
PACKAGES = ("sim", "drivers", "hil")
KERNEL_MARKERS = (b"njit(", b"@kernel", b"@entry")
KEY_LENGTH = 16
KEEP = 3
"""Keyed directories kept below the base (the newest by modification time)."""


def kernel_sources(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[Path]:
    """Every module of the packages that compiles a numba function, in a fixed order."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            if any(marker in path.read_bytes() for marker in KERNEL_MARKERS):
                found.append(path)
    return found


def source_key(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> str:
    """Hash of the kernel modules' paths and contents."""
    digest = hashlib.sha256()
    for path in kernel_sources(root, packages):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:KEY_LENGTH]


def _is_key(name: str) -> bool:
    return len(name) == KEY_LENGTH and all(c in "0123456789abcdef" for c in name)


def _prune(base: Path) -> None:
    """Remove all but the KEEP newest keyed directories below ``base`` (best effort)."""
    try:
        keyed = sorted((p for p in base.iterdir() if p.is_dir() and _is_key(p.name)),
                       key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return
    for old in keyed[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)


def configure(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> str:
    """Point numba's cache at ``<base>/<source key>`` (for this process and the processes it starts)."""
    current = os.environ.get("NUMBA_CACHE_DIR")
    key = source_key(root, packages)
    if current and Path(current).name == key:
        directory = Path(current)                   # set by the process that started this one
    else:
        base = Path(current) if current else root / ".numba-cache"
        directory = base / key
        if not directory.exists():
            try:
                directory.mkdir(parents=True, exist_ok=True)
                _prune(base)
            except OSError:
                pass                                # numba reports an unwritable cache itself
    os.environ["NUMBA_CACHE_DIR"] = str(directory)
    if "numba" in sys.modules:                      # imported before sim: its config has read the environment
        from numba.core import config
        config.CACHE_DIR = str(directory)
    return str(directory)
