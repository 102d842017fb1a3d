"""Emulated serial stimulators (RehaStim2 ScienceMode2, P24 ScienceMode4) and what they share."""
