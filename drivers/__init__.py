"""Stimulator and bus transports for the HIL testbed.

Empty for now: the CAN, serial and loopback transports arrive with later issues.
"""
