"""The systemd unit verifies cleanly, and `hil serve` speaks the notify protocol and stops cleanly."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import free_port

from hil.recording.hilrec import RecordingReader

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
def test_unit_file_verifies_without_any_output(tmp_path):
    hil_bin = shutil.which("hil") or str(Path(sys.executable).with_name("hil"))
    unit = (REPO / "systemd/fes-hil.service").read_text().replace("/opt/fes-hil/venv/bin/hil", hil_bin)
    path = tmp_path / "fes-hil.service"
    path.write_text(unit)
    out = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == "" and out.stderr == "", out.stdout + out.stderr
    for key in ("Type=notify", "WatchdogSec=", "Restart=on-failure", "CPUSchedulingPolicy=fifo", "CPUAffinity=",
                "LimitMEMLOCK=infinity", "LimitRTPRIO=", "User=fes-hil"):
        assert key in unit


def test_serve_notifies_ready_watchdog_stopping_and_exits_cleanly(tmp_path):
    cfg = tmp_path / "service.toml"
    cfg.write_text(f'include = ["{REPO / "configs/elbow-hold.toml"}"]\n'
                   f'[metrics]\nport = {free_port()}\n[recording]\ndirectory = "{tmp_path / "runs"}"\n')
    sock_path = str(tmp_path / "notify.sock")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(sock_path)
    sock.settimeout(1.0)
    env = dict(os.environ, NOTIFY_SOCKET=sock_path, WATCHDOG_USEC="400000")
    proc = subprocess.Popen([sys.executable, "-m", "hil", "serve", "--config", str(cfg)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    got = []
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline and got.count("WATCHDOG=1") < 3:
            try:
                got.append(sock.recv(4096).decode())
            except socket.timeout:
                assert proc.poll() is None, proc.stderr.read()
        assert got and got[0] == "READY=1", got
        assert got.count("WATCHDOG=1") >= 3
        proc.send_signal(signal.SIGTERM)
        while "STOPPING=1" not in got and time.monotonic() < deadline:
            try:
                got.append(sock.recv(4096).decode())
            except socket.timeout:
                pass
        assert proc.wait(60) == 0, proc.stderr.read()
        sock.settimeout(0.2)
        while True:                                # whatever was sent after STOPPING=1
            try:
                got.append(sock.recv(4096).decode())
            except socket.timeout:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        sock.close()
    assert "STOPPING=1" in got and "WATCHDOG=1" not in got[got.index("STOPPING=1"):], got
    runs = list((tmp_path / "runs").glob("*.hilrec"))
    assert len(runs) == 1
    rd = RecordingReader(runs[0])
    ticks = rd.read("ticks")["tick"]
    assert not rd.truncated and len(ticks) > 20 and (ticks == range(len(ticks))).all()
