"""Recorded motion: OpenSim .mot/.sto (coordinates), TRC and C3D (markers) read into one :class:`sim.motion.data.
Motion` (time in s, SI units, radians), resampled to a control period, and the DAS3 reference trajectories built
from it (``reference_trajectory``)."""
