"""Prometheus metrics without disturbing the loop: counters, the shared-memory series and the exporter."""
