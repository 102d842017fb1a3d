"""DAS3 shoulder/arm musculoskeletal model: parameters, plant stepper, equilibrium and file formats."""

from sim._numba_cache import configure as _configure_numba_cache
from sim._numba_target import configure as _configure_numba_target

_configure_numba_target()
_configure_numba_cache()
