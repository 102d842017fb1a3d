"""CAN transport: python-can buses, the DBC message set, the feedback set and the host-local bus."""
