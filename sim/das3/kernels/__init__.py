"""The compiled DAS3 kernels: multibody and muscle residuals with exact derivatives, the Rosenbrock step, outputs."""
