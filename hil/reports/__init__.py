"""Reports and figures: ``hil report``, run metrics, and the analysis and model figures."""
