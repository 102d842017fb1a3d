"""The reduced muscle-torque-generator (MTG) arm (Millard et al. 2019): curves, parameters, plant and kernels."""
