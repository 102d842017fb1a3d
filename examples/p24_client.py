"""An unmodified science_mode_4 P24 controller session against the testbed's emulated P24 (ScienceMode4).

Usage, with the port a serial device (a tty, or the pty ``hil run`` announces) or read from the file
``hil run --config configs/p24.toml --port-file ports.json`` writes once the loop is about to start::

    python3 examples/p24_client.py --port /dev/pts/5 --level mid --channel 4 --current 60
    python3 examples/p24_client.py --port-file ports.json --level low --rate 30

Mid level: ``initialize()``, MlInit, a biphasic pulse (``--pulse-width`` µs each phase, 100 µs apart) at
25 ms with a ramp, five updates rising to ``--current``, then ``--hold`` s with MlGetCurrentData every
0.5 s as the keep-alive, MlStop. Low level: LlInit, then ``--rate`` single pulses a second for ``--hold`` s,
the current rising from 0 to ``--current`` (a late pulse moves the next one on: never two closer than 1/rate),
counting the acknowledgements, LlStop. Prints a JSON log.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import time

from port_file import add_port_arguments, port_of
from science_mode_4 import (
    ChannelPoint,
    DeviceP24,
    LowLevelHighVoltageSource,
    LowLevelMode,
    MidLevelChannelConfiguration,
    SerialPortConnection,
)


def biphasic(current_ma: float, width_us: int) -> list[ChannelPoint]:
    return [ChannelPoint(width_us, current_ma), ChannelPoint(100, 0), ChannelPoint(width_us, -current_ma)]


async def mid_level(device: DeviceP24, args, step) -> None:
    mid = device.get_layer_mid_level()
    await mid.init(False)
    step("initialised")
    config: list = [None] * 8
    for k in range(1, 6):
        config[args.channel - 1] = MidLevelChannelConfiguration(True, 3, 25, biphasic(args.current * k / 5,
                                                                                      args.pulse_width))
        await mid.update(config)
        await mid.get_current_data()
        await asyncio.sleep(0.1)
    step("ramped")
    t_end = time.monotonic() + args.hold
    while time.monotonic() < t_end:
        data = await mid.get_current_data()
        if not data.is_stimulation_active_per_channel[args.channel - 1]:
            step(f"channel inactive: {data.channel_error[args.channel - 1].name}")
            break
        await asyncio.sleep(0.5)
    step("hold done")
    await mid.stop()
    step("stopped")


async def low_level(device: DeviceP24, args, step) -> None:
    low = device.get_layer_low_level()
    await low.init(LowLevelMode.NO_MEASUREMENT, LowLevelHighVoltageSource.STANDARD)
    step("initialised")
    n = max(2, round(args.hold * args.rate))
    colour, connector = (args.channel - 1) % 4, (args.channel - 1) // 4
    acks = errors = 0
    t_next = time.monotonic()
    for k in range(n):
        low.send_channel_config(True, colour, connector, biphasic(args.current * k / (n - 1), args.pulse_width))
        t_next = max(t_next, time.monotonic()) + 1.0 / args.rate    # late: no catch-up burst above the rate
        while (wait := t_next - time.monotonic()) > 0:
            ack = low.packet_buffer.get_packet_from_buffer()
            if ack is None:
                await asyncio.sleep(min(wait, 0.002))
                continue
            acks += 1
            errors += ack.result != 0
    step(f"{n} pulses, {acks} acks, {errors} errors")
    await low.stop()
    step("stopped")


async def session(args) -> list:
    log: list = []
    t0 = time.monotonic()

    def step(name: str) -> None:
        log.append([name, round(time.monotonic() - t0, 3)])

    connection = SerialPortConnection(port_of(args))
    connection.open()
    device = DeviceP24(connection)
    await device.initialize()
    step(f"connected to {device.get_layer_general().device_id}")
    await (mid_level if args.level == "mid" else low_level)(device, args, step)
    connection.close()
    return log


def main() -> None:
    ap = argparse.ArgumentParser()
    add_port_arguments(ap)
    ap.add_argument("--level", choices=("mid", "low"), default="mid")
    ap.add_argument("--channel", type=int, default=4, help="stimulator channel 1..8")
    ap.add_argument("--current", type=float, default=60.0, help="mA")
    ap.add_argument("--pulse-width", type=int, default=300, help="µs per phase")
    ap.add_argument("--rate", type=float, default=30.0, help="low level: pulses per second")
    ap.add_argument("--hold", type=float, default=1.0, help="s")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(session(args))), flush=True)


if __name__ == "__main__":
    main()
