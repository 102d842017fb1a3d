"""The numba cache follows the source of every kernel module (sim.jit.cache): after a change of a callee in
another file, a cached caller runs the new callee, not the machine code compiled with the old one."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import file_size_limit

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


SAVER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
import sim                                    # wraps numba's cache save (sim.jit.cache_lock)
from numba.core.caching import IndexDataCacheFile

load_index = IndexDataCacheFile._load_index
def slow_load_index(self):                    # widen the read-then-write window of a save
    overloads = load_index(self)
    time.sleep(0.3)
    return overloads
IndexDataCacheFile._load_index = slow_load_index
cache = IndexDataCacheFile({cache!r}, "kernel-1.py311", ("stamp", 1))
go = Path({go!r})
while not go.exists():
    time.sleep(0.01)
cache.save(("signature", {i}), "machine code of signature {i}")
"""


def test_processes_saving_one_kernel_at_once_keep_every_entry(tmp_path):
    """Four processes save four signatures of one kernel at the same moment (the window between reading and
    writing the index widened to 0.3 s): each signature loads its own code afterwards. Without the lock
    all four read the empty index, take data file 1, and the index keeps one entry naming another's code."""
    from numba.core.caching import IndexDataCacheFile
    cache, go = tmp_path / "cache", tmp_path / "go"
    cache.mkdir()
    savers = [subprocess.Popen([sys.executable, "-c", SAVER.format(root=str(ROOT), cache=str(cache), go=str(go), i=i)],
                               stderr=subprocess.PIPE, text=True) for i in range(4)]
    go.touch()
    for saver in savers:
        _, err = saver.communicate(timeout=120)
        assert saver.returncode == 0, err
    index = IndexDataCacheFile(str(cache), "kernel-1.py311", ("stamp", 1))
    assert [index.load(("signature", i)) for i in range(4)] == [f"machine code of signature {i}" for i in range(4)]


def test_a_read_only_cache_directory_saves_unlocked_instead_of_failing(tmp_path):
    """Where the lock file cannot be made, the save itself decides (numba warns about an unwritable cache)."""
    from sim.jit.cache_lock import exclusive
    ran = []
    with exclusive(str(tmp_path / "missing")):
        ran.append(True)
    assert ran == [True] and not (tmp_path / "missing").exists()


LOCK_PROBE = """
import fcntl, importlib.util, os, sys
spec = importlib.util.spec_from_file_location("cache_lock", sys.argv[1])
cache_lock = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cache_lock)
if sys.argv[3] == "as-nobody":           # after Python and the module are loaded from root's directories
    os.setgid(65534)
    os.setuid(65534)
with cache_lock.exclusive(sys.argv[2]):
    probe = os.open(os.path.join(sys.argv[2], cache_lock.LOCK_NAME), os.O_RDONLY)
    try:
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        print("unlocked")
    except BlockingIOError:
        print("locked")
"""


def test_a_lock_file_the_user_may_not_write_still_locks(tmp_path):
    """Users sharing a cache directory (the service and a lab member): the lock file one of them made, which
    the other may not write, still locks for the other (flock needs only a read-only descriptor). As root, the
    probe runs as nobody in a directory both can read; otherwise the file is simply made read-only."""
    import shutil
    import tempfile

    from sim.jit.cache_lock import LOCK_NAME
    as_nobody = os.geteuid() == 0
    directory = Path(tempfile.mkdtemp(dir="/dev/shm")) if as_nobody else tmp_path
    try:
        directory.chmod(0o755)
        (directory / LOCK_NAME).touch()
        (directory / LOCK_NAME).chmod(0o444)
        probe = subprocess.run([sys.executable, "-c", LOCK_PROBE, str(ROOT / "sim" / "jit" / "cache_lock.py"),
                                str(directory), "as-nobody" if as_nobody else "as-me"],
                               capture_output=True, text=True, timeout=60)
        assert probe.stdout.strip() == "locked", probe.stderr
    finally:
        if as_nobody:
            shutil.rmtree(directory)


FULL_DISK_RUN = """
import sys
sys.path.insert(0, {root!r})
sys.path.insert(0, {tmp!r})
import sim                                    # wraps numba's cache save (sim.jit.cache_lock)
from pkg.caller import caller
print(caller(), caller())
"""


def test_a_kernel_that_cannot_be_cached_runs_and_says_so_once(tmp_path):
    """A full disk at compile time: the kernels run (compiled in memory) and one warning names the cache,
    instead of the kernel's first call raising numba's write error."""
    _package(tmp_path, 7)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", FULL_DISK_RUN.format(root=str(ROOT), tmp=str(tmp_path))],
                         capture_output=True, text=True, env=env, timeout=300,
                         preexec_fn=file_size_limit(512))       # a full disk's stand-in: writes past 512 bytes fail
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["7", "7"]
    warnings = [line for line in out.stderr.splitlines() if line.startswith("warning: numba's cache")]
    assert len(warnings) == 1 and "File too large" in warnings[0] and "Traceback" not in out.stderr, out.stderr
