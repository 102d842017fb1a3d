"""Controller transports and the contract between them and the loop: the driver interface (``base``),
frame, status bits and command log (``contract``), the shared-memory ring and helper processes, the
loopback controllers, CAN, the emulated RehaStim2 (ScienceMode2) and the sensor stream."""

import sim  # noqa: F401  (first: the numba cache location, sim.jit.cache)
