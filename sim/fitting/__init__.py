"""Fitting the reduced arm: MTG parameters from the full DAS3 model and from recorded motion."""
