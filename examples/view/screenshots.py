"""Regenerate the documentation's screenshots and figures (docs/img/) as a person sees them.

A short loopback run of the elbow-hold channels, swung by a playback schedule, is watched live in headless
Chromium at 1280x800 (``live-view.png``), replayed with ``hil view`` (``replay-view.png``) and reported
(``report-glenoid.png``); a run of the elbow-hold controller itself, whose target the figure marks, is reported
too (``report-joint-angles.png``, ``report-lateness.png``, ``report-passive-loads.png``); with
``--static-opt`` the static optimisation at 45 deg elevation is solved too (``static-opt.png``; the first solve
compiles its kernels for minutes).

    python3 examples/view/screenshots.py [--out docs/img] [--static-opt]

Needs Debian's chromium (/usr/bin/chromium) and playwright.
"""
from __future__ import annotations

import argparse
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1280, "height": 800}
RUN_S = 8.0
CONFIG = """include = ["{root}/configs/elbow-hold.toml"]
[[driver]]
type = "loopback"
controller = "playback"
file = "swing.csv"
direct = false
rate_hz = 50
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_swing(path: Path, duration_s: float) -> None:
    """Anterior deltoid (channel 1) at 0.25 Hz and biceps (channel 4) at 0.5 Hz, each from 15 mA up and down."""
    t = np.arange(0.0, duration_s, 0.02)
    deltoid = 15 + 45 * (0.5 - 0.5 * np.cos(2 * np.pi * 0.25 * t))
    biceps = 15 + 25 * (0.5 - 0.5 * np.cos(2 * np.pi * 0.5 * t))
    rows = "".join(f"{a:.2f},300,{d:.2f},40,300,{b:.2f},40\n" for a, d, b in zip(t, deltoid, biceps))
    path.write_text("time,ch1_pw_us,ch1_amp_ma,ch1_freq_hz,ch4_pw_us,ch4_amp_ma,ch4_freq_hz\n" + rows)


def wait_http(url: str, proc: subprocess.Popen, timeout_s: float = 600.0) -> None:
    """Until ``url`` answers (the first run may compile its kernels for minutes)."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > end:
                raise SystemExit(f"Error: {url} did not answer: {proc.communicate()[1][-2000:]}") from None
            time.sleep(0.2)


def shoot(browser, url: str, until: str, file: Path) -> None:
    """Open ``url`` at 1280x800, wait for the JavaScript condition ``until``, screenshot the viewport."""
    page = browser.new_page(viewport=VIEWPORT)
    page.goto(url)
    page.wait_for_function(until, timeout=120_000)
    page.screenshot(path=str(file))
    page.close()
    print(f"wrote {file}")


def live_and_replay(browser, work: Path, out: Path) -> Path:
    """The live view during the swing run and the replay of its recording; returns the recording."""
    write_swing(work / "swing.csv", RUN_S)
    (work / "live.toml").write_text(CONFIG.format(root=ROOT))
    rec, port = work / "swing.hilrec", free_port()
    run = subprocess.Popen([sys.executable, "-m", "hil", "run", "--config", str(work / "live.toml"),
                            "--duration", str(RUN_S), "--record", str(rec), "--view", str(port), "--metrics-port", "0"],
                           cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/info", run)
        shoot(browser, f"http://127.0.0.1:{port}/", "window.hilView.drawn && window.hilView.drawn.t > 5",
              out / "live-view.png")
    finally:
        run.communicate(timeout=120)
    port = free_port()
    view = subprocess.Popen([sys.executable, "-m", "hil", "view", str(rec), "--port", str(port)], cwd=work,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_http(f"http://127.0.0.1:{port}/api/info", view)
        shoot(browser, f"http://127.0.0.1:{port}/", "window.hilView.drawn && window.hilView.drawn.t > 6",
              out / "replay-view.png")
    finally:
        view.send_signal(signal.SIGTERM)
        view.communicate(timeout=60)
    return rec


def hold_run(work: Path) -> Path:
    """A run of the elbow-hold controller (PID to 90 deg); returns its recording."""
    rec = work / "hold.hilrec"
    subprocess.run([sys.executable, "-m", "hil", "run", "--config", str(ROOT / "configs" / "elbow-hold.toml"),
                    "--duration", str(RUN_S), "--record", str(rec), "--metrics-port", "0"], cwd=work, check=True,
                   stdout=subprocess.DEVNULL)
    return rec


def report(rec: Path, names: tuple[str, ...], work: Path, out: Path) -> None:
    """``hil report`` of ``rec``; its figures ``names`` copied to ``out`` as report-<name>.png."""
    subprocess.run([sys.executable, "-m", "hil", "report", str(rec), "--out", str(work / rec.stem)], check=True,
                   stdout=subprocess.DEVNULL)
    for name in names:
        target = out / f"report-{name.replace('_', '-')}.png"
        shutil.copy(work / rec.stem / f"{name}.png", target)
        print(f"wrote {target}")


def static_opt(work: Path, out: Path) -> None:
    subprocess.run([sys.executable, "-m", "hil", "analyze", "static-opt", "--elevation", "45", "--criterion", "c",
                    "--out", str(work / "so")], check=True, stdout=subprocess.DEVNULL)
    shutil.copy(work / "so" / "static_opt.png", out / "static-opt.png")
    print(f"wrote {out / 'static-opt.png'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    parser.add_argument("--static-opt", action="store_true", help="also solve and draw the static optimisation")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        rec = live_and_replay(browser, Path(tmp), args.out)
        browser.close()
        report(rec, ("glenoid",), Path(tmp), args.out)
        report(hold_run(Path(tmp)), ("joint_angles", "lateness", "passive_loads"), Path(tmp), args.out)
        if args.static_opt:
            static_opt(Path(tmp), args.out)


if __name__ == "__main__":
    main()
