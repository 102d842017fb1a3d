"""Controller plug-ins in the loop's own process: the plug-in interface, the built-ins and the loopback driver."""
