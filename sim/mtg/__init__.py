"""The reduced muscle-torque-generator (MTG) arm (Millard et al. 2019): curves, parameters, multibody kernels
(``arm``), the step (``step``) and the plant."""
