"""DAS3 shoulder/arm musculoskeletal model: parameters, plant stepper, equilibrium and file formats."""

from sim._numba_cache import configure as _configure_numba_cache

_configure_numba_cache()
