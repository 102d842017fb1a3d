"""A minimal external CAN controller for the testbed, written only against python-can and cantools.

It waits for the HIL's feedback (HIL_Status, or HIL_SensorFD on a CAN FD setup), then stimulates one
channel with a ramp of amplitude and prints a JSON summary (frames seen, elbow flexion at the start and
the end, the last GH stability value, echo round trips). A sensor value the plant does not model (the GH
stability of the reduced MTG arm) decodes as the DBC's value-table name "not_available", not as a number.
Run it against ``hil run --config configs/can.toml`` in another terminal::

    python3 examples/can_controller.py --dbc configs/fes-hil.dbc --stim-channel 4 --duration 3
"""
from __future__ import annotations

import argparse
import json
import math
import time

import can
import cantools


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--interface", default="udp_multicast")
    ap.add_argument("--channel", default="ff11::fe5:c",
                    help="the udp_multicast group; ff11::/16 stays on this host (configs/can.toml)")
    ap.add_argument("--dbc", default="configs/fes-hil.dbc")
    ap.add_argument("--stim-channel", type=int, default=4, help="1-based (4: biceps in the default map)")
    ap.add_argument("--amplitude-ma", type=float, default=60.0)
    ap.add_argument("--pulse-width-us", type=int, default=300)
    ap.add_argument("--frequency-hz", type=float, default=40.0)
    ap.add_argument("--rate-hz", type=float, default=50.0)
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--wait", type=float, default=60.0, help="how long to wait for the HIL, s")
    args = ap.parse_args()

    db = cantools.database.load_file(args.dbc)
    stim = db.get_message_by_name("FES_StimCmd")
    bus = can.Bus(interface=args.interface, channel=args.channel)
    seen: dict[str, int] = {}
    elbow = []
    gh_stability = None
    sent = {}
    round_trips = []
    try:
        t_wait = time.monotonic() + args.wait
        while time.monotonic() < t_wait:                 # the HIL is up when its feedback arrives
            msg = bus.recv(0.5)
            if msg is not None and msg.arbitration_id >= 0x300:
                break
        else:
            raise SystemExit("no feedback frame from the HIL received")
        counter = 1        # echo_counter is 0 until a command is accepted: 0 would match too early
        n_sent = 0
        t0 = time.monotonic()
        next_send = t0
        while (now := time.monotonic()) < t0 + args.duration:
            if now >= next_send:
                ramp = min(1.0, (now - t0) / (0.5 * args.duration))
                data = stim.encode(dict(channel=args.stim_channel, mode=0, enable=1, counter=counter,
                                        pulse_width=args.pulse_width_us, amplitude=round(args.amplitude_ma * ramp, 2),
                                        frequency=args.frequency_hz))
                bus.send(can.Message(arbitration_id=stim.frame_id, data=data, is_extended_id=False))
                sent[counter] = time.monotonic()
                counter = (counter + 1) % 256
                n_sent += 1
                next_send += 1.0 / args.rate_hz
            msg = bus.recv(0.002)
            if msg is None or msg.arbitration_id < 0x300:
                continue
            name = db.get_message_by_frame_id(msg.arbitration_id).name
            seen[name] = seen.get(name, 0) + 1
            values = db.decode_message(msg.arbitration_id, msg.data)
            if values.get("echo_counter") in sent:         # HIL_Status and HIL_SensorFD carry it
                round_trips.append(time.monotonic() - sent.pop(values["echo_counter"]))
            if "q_ELx" in values:
                elbow.append(math.degrees(values["q_ELx"]))
            gh_stability = str(values.get("gh_stability", gh_stability))  # a number, or "not_available"
    finally:
        bus.shutdown()
    print(json.dumps({"frames": seen, "commands_sent": n_sent, "elbow_first_deg": elbow[0] if elbow else None,
                      "elbow_last_deg": elbow[-1] if elbow else None, "gh_stability_last": gh_stability,
                      "echoes": len(round_trips),
                      "round_trip_ms_median": sorted(round_trips)[len(round_trips) // 2] * 1e3 if round_trips else None}))


if __name__ == "__main__":
    main()
