"""How the example clients find the emulated stimulator: ``--port DEVICE``, or ``--port-file ports.json``
(written by ``hil run --port-file`` once the loop is about to start), waiting up to ``--wait`` s for it.
Shared by ``rehastim2_client.py`` and ``p24_client.py`` (run as scripts, this directory is on the path)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time


def add_port_arguments(ap: argparse.ArgumentParser) -> None:
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", help="serial device of the stimulator")
    where.add_argument("--port-file", help="JSON written by `hil run --port-file`: use its stimulator port")
    ap.add_argument("--wait", type=float, default=60.0, help="how long to wait for --port-file to appear, s")


def stimulator_port(port_file: str, wait_s: float) -> str:
    """The first announced ``stimulator`` port in ``port_file``, waiting up to ``wait_s`` for it."""
    deadline = time.monotonic() + wait_s
    while not os.path.exists(port_file):
        if time.monotonic() > deadline:
            sys.exit(f"{port_file} did not appear within {wait_s:g} s: is `hil run --port-file {port_file}` running?")
        time.sleep(0.1)
    with open(port_file, encoding="utf-8") as fh:
        ports = json.load(fh)
    for announced in ports.values():
        if "stimulator" in announced:
            return announced["stimulator"]
    sys.exit(f"{port_file} announces no stimulator port: {ports}")


def port_of(args: argparse.Namespace) -> str:
    """The stimulator's serial device from the parsed ``--port`` / ``--port-file`` arguments."""
    return args.port or stimulator_port(args.port_file, args.wait)
