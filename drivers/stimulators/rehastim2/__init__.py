"""Hasomed RehaStim2 (ScienceMode2) emulation: frame codec, device side, the serial driver."""
