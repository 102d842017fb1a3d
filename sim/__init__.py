"""DAS3 shoulder/arm musculoskeletal model: parameters, plant stepper, equilibrium and file formats."""

from sim.jit.cache import configure as _configure_numba_cache
from sim.jit.target import configure as _configure_numba_target

_configure_numba_target()
_configure_numba_cache()
