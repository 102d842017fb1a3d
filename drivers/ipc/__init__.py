"""Inter-process plumbing of the drivers: shared-memory rings, link processes, helper-process start-up."""
