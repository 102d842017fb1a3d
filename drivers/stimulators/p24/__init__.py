"""HasomedScience P24 (ScienceMode4) emulation: frame codec, pulse shapes, device side, the serial driver."""
