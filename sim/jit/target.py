"""The CPU the kernels are compiled for: the host's, with 256-bit vectors preferred over 512-bit ones; and the
math library their loops call: the C library's, never Intel's SVML (:func:`configure_math_library`).

The kernels' vectorised loops are short (a dual number's twelve slots, a muscle's nine DOFs, the GH
line-of-action blocks' 9 to 126 rows). With 512-bit vectors LLVM runs such a loop eight elements at a
time and the rest one by one, so most of it runs scalar; with 256-bit vectors four at a time. LLVM already
prefers 256-bit vectors on most AVX-512 CPUs (e.g. Intel's Skylake-SP and later) but not on AMD Zen 4, where
``hil bench plant`` shows the outputs and solve phases faster with the preference. It changes no result:
every sum's order is fixed in the source and nothing is contracted to FMA, so the bits are those of any
vector width (``tests/sim/test_cpu_independence.py`` compares with the two-wide generic x86-64 target).

Set from ``sim/__init__.py`` before any kernel is compiled or loaded from the cache (numba keys its cache on
the CPU name and features, so the cached code always matches). A ``NUMBA_CPU_NAME`` or ``NUMBA_CPU_FEATURES``
given by the user wins: nothing is changed then.
"""
from __future__ import annotations

import os
import sys

PREFERENCE = "+prefer-256-bit"
SVML_SWITCH = "NUMBA_DISABLE_INTEL_SVML"
"""numba's switch (read when numba is imported) that keeps Intel's SVML out of the vectorised loops."""


def target_features(host_features: str) -> str:
    """The host's feature string with the 256-bit preference added (once)."""
    features = [f for f in host_features.split(",") if f and f.lstrip("+-") != PREFERENCE[1:]]
    return ",".join(features + [PREFERENCE])


def configure() -> str | None:
    """Prefer 256-bit vectors for this process and the processes it starts; returns the features set, or None
    when the user chose the target (``NUMBA_CPU_NAME`` / ``NUMBA_CPU_FEATURES``) or the host is not x86."""
    if os.environ.get("NUMBA_CPU_NAME") or os.environ.get("NUMBA_CPU_FEATURES"):
        return None
    import llvmlite.binding as ll

    try:
        host = ll.get_host_cpu_features().flatten()
    except RuntimeError:                  # llvmlite cannot tell on this host: leave numba's default
        return None
    if "+avx512f" not in host.split(","):  # the preference only matters where 512-bit vectors exist
        return None
    features = target_features(host)
    os.environ["NUMBA_CPU_FEATURES"] = features
    if "numba" in sys.modules:            # imported before sim: its config has read the environment
        from numba.core import config
        config.CPU_FEATURES = features
    return features


def configure_math_library() -> bool:
    """Keep the kernels on the C library's ``exp``, ``log`` and ``pow``: a numba with Intel's SVML (a conda install
    with ``icc_rt``; pip's llvmlite has no SVML) gives a vectorised loop SVML's functions, whose last bits differ
    from the C library's and whose use follows the loop's vector width, so the plant's bits would depend on the
    CPU. Sets ``NUMBA_DISABLE_INTEL_SVML=1`` for this process and the ones it starts, unless the user set it.
    Returns False when numba was imported earlier with SVML in use (too late to switch it off)."""
    os.environ.setdefault(SVML_SWITCH, "1")
    numba = sys.modules.get("numba")
    return not (numba is not None and getattr(numba.config, "USING_SVML", False))
