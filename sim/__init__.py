"""The plants and their numerics, one subpackage per concept: ``sim.das3`` (the DAS3 shoulder/arm model, its
parameters, plant stepper and equilibrium; compiled kernels in ``sim.das3.kernels``), ``sim.mtg`` (the reduced
muscle-torque-generator arm), ``sim.analysis`` (static optimisation, maximum moments, feed-forward, channel
optimisation), ``sim.fitting`` (MTG parameters from DAS3 and from recorded motion) and ``sim.jit`` (numba's
decorators, cache and CPU target); beside them the plant base (``plants``), the stimulation map's rule
(``stimulation_map``), config schemas, input files and the user-input error. ``sim`` imports neither ``drivers``
nor ``hil``."""

from sim.jit.cache import configure as _configure_numba_cache
from sim.jit.cache_lock import lock_cache_saves as _lock_numba_cache_saves
from sim.jit.target import configure as _configure_numba_target
from sim.jit.target import configure_math_library as _configure_numba_math

if not _configure_numba_math():
    import warnings as _warnings

    _warnings.warn("numba was imported before sim with Intel SVML in use: the plant's last bits may then depend on "
                   "the CPU (import sim first, or set NUMBA_DISABLE_INTEL_SVML=1)", RuntimeWarning, stacklevel=2)
_configure_numba_target()
_configure_numba_cache()
_lock_numba_cache_saves()
