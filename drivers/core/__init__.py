"""The contract between the loop and every driver: the driver interface, the frames and status bits, config tables."""
