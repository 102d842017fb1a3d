"""An unmodified pysciencemode RehaStim2 controller session against the testbed's serial stimulator.

Usage, with the port a serial device (a tty, or the pty ``hil run`` announces) or read from the file
``hil run --config configs/serial.toml --port-file ports.json`` writes once the loop is about to start::

    python3 examples/rehastim2_client.py --port /dev/pts/5 --channel 4 --amplitude 60
    python3 examples/rehastim2_client.py --port-file ports.json --wait 60

Connects, initialises channel-list mode (25 ms period = 40 Hz), starts stimulation, ramps the amplitude
with repeated updates, pauses, resumes, stops and disconnects; prints a JSON log of the steps.
pysciencemode's client spin-waits for replies, so it must run in its own process.
"""
from __future__ import annotations

import argparse
import json
import time

from port_file import add_port_arguments, port_of
from pysciencemode import Channel, Device, Rehastim2


def main() -> None:
    ap = argparse.ArgumentParser()
    add_port_arguments(ap)
    ap.add_argument("--channel", type=int, default=4)
    ap.add_argument("--amplitude", type=int, default=60)
    ap.add_argument("--pulse-width", type=int, default=300)
    ap.add_argument("--hold", type=float, default=1.0, help="seconds at full amplitude")
    args = ap.parse_args()
    port = port_of(args)
    log = []

    def step(name: str) -> None:
        log.append([name, round(time.monotonic() - t0, 3)])

    t0 = time.monotonic()
    stim = Rehastim2(port)
    step("connected")
    channel = Channel(mode="Single", no_channel=args.channel, amplitude=0, pulse_width=args.pulse_width,
                      name="muscle", device_type=Device.Rehastim2)
    stim.init_channel(stimulation_interval=25, list_channels=[channel])
    step("initialised")
    for k in range(1, 6):                                    # ramp: five updates
        channel.set_amplitude(args.amplitude * k / 5)
        stim.start_stimulation(upd_list_channels=[channel])
        time.sleep(0.1)
    step("ramped")
    time.sleep(args.hold)
    step("hold done")
    stim.pause_stimulation()
    step("paused")
    time.sleep(0.5)
    stim.start_stimulation(upd_list_channels=[channel])
    time.sleep(0.3)
    step("resumed")
    stim.end_stimulation()
    step("stopped")
    stim.disconnect()
    print(json.dumps(log), flush=True)


if __name__ == "__main__":
    main()
