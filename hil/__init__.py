"""FES hardware-in-the-loop testbed: command line and (later) the real-time service."""

__version__ = "0.1.0"
