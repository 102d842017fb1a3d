"""An unmodified pysciencemode RehaStim2 controller session against the testbed's serial stimulator.

Usage, with the port a serial device (a tty, or the pty ``hil run`` announces) or read from the file
``hil run --config configs/serial.toml --port-file ports.json`` writes once the loop is about to start::

    python3 examples/rehastim2_client.py --port /dev/pts/5 --channel 4 --amplitude 60
    python3 examples/rehastim2_client.py --port-file ports.json --wait 60

Connects, initialises channel-list mode (25 ms period = 40 Hz), starts stimulation, ramps the amplitude
with repeated updates, pauses, resumes, stops and disconnects; prints a JSON log of the steps.
pysciencemode's client spin-waits for replies, so it must run in its own process.

When the stimulator goes away (the service stopped), the session ends with one line on stderr and exit
status 1: a failed write or read in the client's own threads (its watchdog sends every 0.8 s) ends the
session at its next step instead of printing a traceback per thread.
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from port_file import add_port_arguments, port_of
from pysciencemode import Channel, Device, Rehastim2
from serial import SerialException

LINK_ERRORS = (SerialException, OSError)
link_failures: list[BaseException] = []
link_lost = threading.Event()


def _thread_failed(args) -> None:
    """pysciencemode's threads (watchdog, reply reader): a lost link is noted for the session to end on."""
    if issubclass(args.exc_type, LINK_ERRORS):
        link_failures.append(args.exc_value)
        link_lost.set()
    else:
        threading.__excepthook__(args)


def pause(seconds: float) -> None:
    """Sleep, ending the session at once if the link was lost meanwhile."""
    if link_lost.wait(seconds):
        raise link_failures[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    add_port_arguments(ap)
    ap.add_argument("--channel", type=int, default=4)
    ap.add_argument("--amplitude", type=int, default=60)
    ap.add_argument("--pulse-width", type=int, default=300)
    ap.add_argument("--hold", type=float, default=1.0, help="seconds at full amplitude")
    args = ap.parse_args()
    port = port_of(args)
    threading.excepthook = _thread_failed
    stim = None
    try:
        stim = Rehastim2(port)
        print(json.dumps(session(stim, args)), flush=True)
    except LINK_ERRORS as exc:
        sys.exit(f"rehastim2_client: the stimulator at {port} went away ({type(exc).__name__}: {exc}); "
                 "did the service stop?")
    finally:
        if stim is not None:                  # let pysciencemode's threads end
            stim.stimulation_active = stim.reha_connected = False


def session(stim, args) -> list:
    """The steps of the session with their times (s)."""
    log = []

    def step(name: str) -> None:
        log.append([name, round(time.monotonic() - t0, 3)])

    t0 = time.monotonic()
    step("connected")
    channel = Channel(mode="Single", no_channel=args.channel, amplitude=0, pulse_width=args.pulse_width,
                      name="muscle", device_type=Device.Rehastim2)
    stim.init_channel(stimulation_interval=25, list_channels=[channel])
    step("initialised")
    for k in range(1, 6):                                    # ramp: five updates
        channel.set_amplitude(args.amplitude * k / 5)
        stim.start_stimulation(upd_list_channels=[channel])
        pause(0.1)
    step("ramped")
    pause(args.hold)
    step("hold done")
    stim.pause_stimulation()
    step("paused")
    pause(0.5)
    stim.start_stimulation(upd_list_channels=[channel])
    pause(0.3)
    step("resumed")
    stim.end_stimulation()
    step("stopped")
    stim.disconnect()
    return log


if __name__ == "__main__":
    main()
