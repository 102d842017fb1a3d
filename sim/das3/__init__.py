"""The DAS3 shoulder-and-arm model (Chadwick et al. 2014): parameters, the plant stepper, equilibrium, outputs."""
