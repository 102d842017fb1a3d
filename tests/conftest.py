"""Shared fixtures (the DAS3 models, configs on the shipped ones, a held port, a localhost LSL config) and the
suite's organisation: the ``e2e`` marker by folder, the ``realtime`` marker by module or test, one xdist group
that runs the real-time and host-bus tests one at a time, and numba's cache warmed (``warm_up.py``) before parallel
workers start. Plain helper functions live in ``helpers.py``."""
import os
import socket
import sys
import textwrap
from pathlib import Path

# One BLAS thread per process: two workers on two cores, each with a multi-threaded BLAS, oversubscribe the CPU
# (set before numpy loads, and inherited by the workers and every process a test starts).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest
import warm_up
from helpers import CONFIGS

from sim.das3.config import ModelConfig
from sim.das3.model import load_model

TESTS = Path(__file__).resolve().parent

REALTIME = {
    "test_attacks": None,
    "test_attacks_exporter": None,
    "test_bench_link": None,
    "test_bench_platform": None,
    "test_monitoring": None,
    "test_p24": None,
    "test_serial": {"test_unmodified_pysciencemode_client_flexes_the_elbow",
                    "test_the_rehastim2_client_ends_in_one_line_when_the_service_stops"},
    "test_mtg_service": {"test_the_unmodified_rehastim2_client_flexes_the_mtg_elbow"},
    "test_service_unit": None,
    "test_tick_stall": None,
}
"""Tests whose outcome depends on a real-time loop keeping its clock or on the timing of watchdogs and restarts:
module -> its test functions so marked (None: all of them)."""

HOST_BUSES = {
    "test_can": None,
    "test_lsl": None,
    "test_mtg_service": {"test_a_can_controller_process_flexes_the_mtg_elbow_and_reads_no_gh_stability"},
    "test_network_exposure": None,
    "test_lab_sensor_transports": {"test_lsl_arm_stream_carries_the_lab_sensors_after_the_arm",
                                   "test_hil_run_publishes_the_imus_on_the_lsl_arm_stream"},
    "test_voluntary": {"test_an_lsl_stream_is_a_voluntary_source"},
}
"""Tests on a bus every process of the host shares: python-can's udp_multicast (one UDP port for every group, so
a socket hears the groups other sockets joined) and LSL's stream discovery (module -> test functions, None: all)."""

SERIAL_GROUP = "serial"
"""The xdist group (``--dist loadgroup``) of the realtime and host-bus tests: one worker runs them in turn."""

def _listed(table: dict, item) -> bool:
    names = table.get(item.path.stem, ())
    return names is None or getattr(item, "originalname", item.name) in names


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items) -> None:
    """Marks before xdist reads the groups: ``e2e`` below ``tests/e2e``, ``realtime`` from REALTIME, and the
    serial group for REALTIME and HOST_BUSES; the serial group's tests first, so that the one worker that runs
    them all in turn starts on them while the other takes the rest (scheduled last, they made the run's tail)."""
    serial = set()
    for item in items:
        if TESTS / "e2e" in item.path.parents:
            item.add_marker(pytest.mark.e2e)
        realtime = _listed(REALTIME, item)
        if realtime:
            item.add_marker(pytest.mark.realtime)
        if realtime or _listed(HOST_BUSES, item):
            item.add_marker(pytest.mark.xdist_group(SERIAL_GROUP))
            serial.add(id(item))
    items.sort(key=lambda item: id(item) not in serial)


def pytest_configure(config) -> None:
    """The whole suite (no paths given) runs on the workers of ``-n`` in pyproject.toml; chosen files or tests run
    in this one process unless ``-n`` is given on the command line."""
    explicit = any(arg.startswith(("-n", "--numprocesses")) for arg in config.invocation_params.args)
    if not hasattr(config, "workerinput") and config.args_source != pytest.Config.ArgsSource.TESTPATHS \
            and not explicit:
        config.option.numprocesses, config.option.dist = 0, "no"


def _parallel_controller(config) -> bool:
    """This process hands tests to two or more xdist workers."""
    return (not hasattr(config, "workerinput") and (config.getoption("numprocesses", None) or 0) > 1
            and config.getoption("dist", "no") != "no" and not config.option.collectonly)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session) -> None:
    """Before xdist starts its workers, compile the kernels once: numba reads, changes and writes back a kernel's
    cache index without a lock, so workers compiling one kernel at once could lose or swap its entries."""
    if _parallel_controller(session.config):
        warm_numba_cache(session.config.pluginmanager.get_plugin("terminalreporter"))


def warm_numba_cache(reporter) -> None:
    """The kernels compiled on both cores (:func:`warm_up.warm`), a line per step on the terminal."""
    def say(text: str) -> None:
        if reporter is not None:
            reporter.write_line(text)
        else:
            print(text, file=sys.stderr)
    warm_up.warm(say)


@pytest.fixture(scope="session")
def model():
    """The published DAS3 model (hand weightless, as in the release)."""
    return load_model()


@pytest.fixture(scope="session")
def thelen_model():
    """The DAS3 model with Thelen 2003 muscles (``ModelConfig.muscle_model``)."""
    return load_model(ModelConfig(muscle_model="thelen2003"))


@pytest.fixture(scope="session")
def model_hw():
    """The DAS3 model with the hand's weight switched on (``ModelConfig.hand_weight``)."""
    return load_model(ModelConfig(hand_weight=True))


@pytest.fixture
def config_over(tmp_path):
    """``config_over(base, text, name)``: write ``tmp_path/name``, a config that includes the shipped
    ``configs/<base>`` and adds ``text`` (dedented), and return its path."""
    def write(base: str, text: str = "", name: str = "test.toml") -> Path:
        path = tmp_path / name
        path.write_text(f'include = ["{CONFIGS / base}"]\n' + textwrap.dedent(text))
        return path
    return write


@pytest.fixture
def held_port():
    """A TCP port on 127.0.0.1 held (listening) by this process while the test runs: a stand-in for a
    lab's `hil serve` or a second experiment on the configured metrics port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture(scope="module")
def lsl_config(tmp_path_factory):
    """A liblsl config that keeps LSL on 127.0.0.1, named in LSLAPICFG (this process and its children)."""
    pytest.importorskip("pylsl")
    from drivers.lsl.driver import LOCALHOST_API_CONFIG
    path = tmp_path_factory.mktemp("lsl") / "lsl_api.cfg"
    path.write_text(LOCALHOST_API_CONFIG)
    before = os.environ.get("LSLAPICFG")
    os.environ["LSLAPICFG"] = str(path)      # liblsl reads it at its first use in a process
    yield path
    if before is None:
        del os.environ["LSLAPICFG"]
    else:
        os.environ["LSLAPICFG"] = before
