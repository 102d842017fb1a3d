"""Numba infrastructure: the kernel decorators, where compiled kernels are cached, the CPU target, compile progress."""
