"""DAS3 shoulder/arm musculoskeletal model: parameters, plant stepper, equilibrium and file formats."""
