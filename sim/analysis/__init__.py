"""Analyses of the DAS3 model: static optimisation with the GH constraint, maximum moments, channel optimisation."""
