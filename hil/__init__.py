"""FES hardware-in-the-loop testbed: the real-time service (loop, tick engine, safety, recording, metrics),
its supervisor and the ``hil`` command line. Layers: ``sim`` (the plant) <- ``drivers`` (transports and
the loop/driver contract) <- ``hil``."""

import sim  # noqa: F401  (first: the numba cache location, sim.jit.cache)

__version__ = "0.1.0"
