"""Controller transports and the contract between them and the loop, one subpackage per concept:

- ``drivers.core``: the driver interface (``interface``), the sensor frame, status bits, command log and reject
  reasons (``contract``) and the config-table reader every driver parses its ``[[driver]]`` table with;
- ``drivers.ipc``: shared-memory rings, helper processes and the link process an external transport's I/O runs in;
- ``drivers.controllers``: the loopback driver and the controller plug-ins (built-in ``playback``, ``elbow_hold``);
- ``drivers.can``: CAN (SocketCAN or the in-process bus) with its DBC and feedback frames;
- ``drivers.lsl``: Lab Streaming Layer inlets and outlets;
- ``drivers.stimulators``: the emulated stimulators on a serial port, ``rehastim2`` (ScienceMode2, RehaStim2)
  and ``p24`` (ScienceMode4, HasomedScience P24), and the sensor stream they send.
"""

import sim  # noqa: F401  (first: the numba cache location, sim.jit.cache)
