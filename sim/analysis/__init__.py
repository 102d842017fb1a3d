"""Analyses of the DAS3 model: static optimisation with the GH constraint (the model at rest in its unknowns:
``rest_model``), maximum moments, feed-forward schedules, channel optimisation."""
