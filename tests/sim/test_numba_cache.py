"""The numba cache follows the source of every kernel module (sim.jit.cache): after a change of a callee in
another file, a cached caller runs the new callee, not the machine code compiled with the old one."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from sim.jit.cache import kernel_sources, source_key

ROOT = Path(__file__).resolve().parents[2]

CALLER = """
from numba import njit
from pkg.callee import value

@njit(cache=True)
def caller():
    return value() + 0
"""
CALLEE = """
from numba import njit

@njit(cache=True)
def value():
    return {}
"""
RUN = """
import importlib.util, sys
from pathlib import Path
if {keyed}:   # the module alone, not the sim package (which would configure for the project's own kernels)
    spec = importlib.util.spec_from_file_location("numba_cache", {module!r})
    numba_cache = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(numba_cache)
    numba_cache.configure(Path({tmp!r}), ("pkg",))
sys.path.insert(0, {tmp!r})
from pkg.caller import caller
print(caller())
"""


def _package(tmp: Path, value: int) -> None:
    (tmp / "pkg").mkdir(exist_ok=True)
    (tmp / "pkg" / "__init__.py").write_text("")
    (tmp / "pkg" / "caller.py").write_text(CALLER)
    (tmp / "pkg" / "callee.py").write_text(CALLEE.format(value))


def _run(tmp: Path, keyed: bool, cache: Path) -> str:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    code = RUN.format(module=str(ROOT / "sim" / "jit" / "cache.py"), tmp=str(tmp), keyed=keyed)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _callee_changed_between_runs(tmp_path: Path, keyed: bool) -> tuple[str, str]:
    _package(tmp_path, 1)
    first = _run(tmp_path, keyed, tmp_path / "cache")
    _package(tmp_path, 2)          # only the callee's file changes; the caller's file and its cache stay
    return first, _run(tmp_path, keyed, tmp_path / "cache")


def test_plain_numba_caching_runs_a_stale_callee(tmp_path):
    """The hazard itself, with numba's own cache location: the caller's cache still holds callee 1."""
    assert _callee_changed_between_runs(tmp_path, keyed=False) == ("1", "1")


def test_the_keyed_cache_runs_the_changed_callee(tmp_path):
    assert _callee_changed_between_runs(tmp_path, keyed=True) == ("1", "2")
    keyed = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert len(keyed) == 2          # one directory per version of the kernel sources


def test_the_key_follows_kernel_modules_only(tmp_path):
    _package(tmp_path, 1)
    (tmp_path / "pkg" / "plain.py").write_text("X = 1\n")
    key = source_key(tmp_path, ("pkg",))
    assert [p.name for p in kernel_sources(tmp_path, ("pkg",))] == ["callee.py", "caller.py"]
    (tmp_path / "pkg" / "plain.py").write_text("X = 2\n")
    assert source_key(tmp_path, ("pkg",)) == key
    (tmp_path / "pkg" / "callee.py").write_text(CALLEE.format(3))
    assert source_key(tmp_path, ("pkg",)) != key


def test_the_project_key_covers_the_plant_and_tick_kernels():
    """The default root is the project directory: the key hashes the kernels the tick is compiled with (the
    tick in hil/rt/plants.py calls the step in sim/das3/kernels/step.py), not an empty list."""
    found = {p.relative_to(ROOT).as_posix() for p in kernel_sources()}
    assert {"sim/das3/kernels/step.py", "sim/das3/kernels/muscles.py", "hil/rt/plants.py"} <= found
    assert source_key() != hashlib.sha256().hexdigest()[:len(source_key())]


def test_the_service_processes_share_one_keyed_directory(tmp_path):
    """A process started by a configured one (the real-time process, a Dask worker) keeps its directory."""
    code = textwrap.dedent(f"""
        import os, subprocess, sys
        sys.path.insert(0, {str(ROOT)!r})
        import sim
        from numba.core import config
        child = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, {str(ROOT)!r}); import sim, os; "
                                "from numba.core import config; print(config.CACHE_DIR)"],
                               capture_output=True, text=True, check=True).stdout.strip()
        print(os.environ["NUMBA_CACHE_DIR"], config.CACHE_DIR, child)
        """)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "base")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    here, configured, child = out.stdout.split()
    assert here == configured == child == str(tmp_path / "base" / source_key())
