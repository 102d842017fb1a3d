"""Shared fixtures: the DAS3 model for the numerical tests of the plant (``sim``), and configs built
on the shipped ones for the service tests."""
import os
import socket
import textwrap
from pathlib import Path

import pytest

from sim.das3.config import ModelConfig
from sim.das3.model import load_model


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


CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.fixture
def config_over(tmp_path):
    """``config_over(base, text, name)``: write ``tmp_path/name``, a config that includes the shipped
    ``configs/<base>`` and adds ``text`` (dedented), and return its path."""
    def write(base: str, text: str = "", name: str = "test.toml") -> Path:
        path = tmp_path / name
        path.write_text(f'include = ["{CONFIGS / base}"]\n' + textwrap.dedent(text))
        return path
    return write


def write_sweep(tmp_path: Path, duration_s: float, body: str, base: str = "elbow-hold.toml") -> Path:
    """``tmp_path/sweep.toml``: a sweep of the shipped ``configs/<base>`` for ``duration_s`` with ``body``
    (its ``[grid]`` / ``[random]`` tables)."""
    path = tmp_path / "sweep.toml"
    path.write_text(f'base = "{CONFIGS / base}"\nduration_s = {duration_s}\n' + textwrap.dedent(body))
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for exporters and links in tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def held_port():
    """A TCP port on 127.0.0.1 held (listening) by this process while the test runs: a stand-in for a
    lab's `hil serve` or a second experiment on the configured metrics port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


def metrics_port(ports: dict) -> int:
    """The metrics exporter's port in the JSON of `hil run --port-file`."""
    return int(ports["metrics"]["exporter"].rsplit(":", 1)[1])


def wait_for_port_file(path: Path, proc, timeout: float = 120.0) -> dict:
    """The ports a `hil run --port-file` announced, once the file exists (fails if the run exits first)."""
    import json
    import time
    t_end = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"hil run exited early: {proc.communicate()[1]}")
        if time.monotonic() > t_end:
            raise AssertionError("no port file")
        time.sleep(0.05)
    return json.loads(path.read_text())


class SensorFrames:
    """Collects the (echo, frame) packets of a sensor-stream tty in a thread while ``proc`` runs."""

    def __init__(self, port: str, proc) -> None:
        import threading

        import serial

        from drivers.stimulators.sensor_stream import SensorStreamReader
        self.serial, self.proc = serial.Serial(port, timeout=0.1), proc
        self.reader, self.frames = SensorStreamReader(), []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        import serial
        while self.proc.poll() is None:
            try:
                self.frames.extend(self.reader.feed(self.serial.read(4096)))
            except serial.SerialException:      # the service closed the pty at the end of the run
                break

    def close(self) -> None:
        self.thread.join(2)
        self.serial.close()


def loopback_driver(controller, period_s: float, muscle_names=(), channel_names=(), group_names=(), rate_hz=None,
                    params=None):
    """A LoopbackDriver running ``controller`` (reset here with ``params``) every tick, or at ``rate_hz``."""
    from drivers.controllers.loopback import LoopbackDriver
    from drivers.controllers.plugin import ControllerSettings
    from sim.das3.model import DOF_NAMES
    rate = 1.0 / period_s if rate_hz is None else rate_hz
    settings = ControllerSettings(period_s=period_s, rate_hz=rate,
                                  call_period_s=max(1, round(1.0 / (rate * period_s))) * period_s,
                                  channel_names=tuple(channel_names), muscle_names=tuple(muscle_names),
                                  group_names=tuple(group_names), dof_names=DOF_NAMES, params=params or {})
    controller.reset(settings)
    return LoopbackDriver(controller, settings)


def processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, name) of every process."""
    out = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            out[int(entry.name)] = (int(stat[stat.rindex(")") + 2:].split()[1]), name)
    return out


def descendants(pid: int) -> dict[int, str]:
    """pid -> name of every process below ``pid``."""
    table, found, todo = processes(), {}, [pid]
    while todo:
        parent = todo.pop()
        for child, (ppid, name) in table.items():
            if ppid == parent and child not in found:
                found[child] = name
                todo.append(child)
    return found


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
