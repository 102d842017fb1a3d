"""The kernels' compile target (sim.jit.target): the host CPU with 256-bit vectors preferred where it has
512-bit ones, unless the user chose the target."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sim.jit.target import PREFERENCE, target_features

ROOT = Path(__file__).resolve().parents[2]
PROBE = """
import json
import llvmlite.binding as ll
import sim                                     # configures the target before any kernel
from numba.core.registry import cpu_target
codegen = cpu_target.target_context.codegen()
print(json.dumps({"features": codegen._tm_features, "host_avx512": "+avx512f" in ll.get_host_cpu_features().flatten()}))
"""


def _probe(**env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_CPU_")}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=ROOT, timeout=120,
                         env={**clean, **env})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_the_preference_is_added_once_to_the_host_features():
    assert target_features("+avx2,+avx512f") == "+avx2,+avx512f,+prefer-256-bit"
    assert target_features("+avx2,-prefer-256-bit,+avx512f") == "+avx2,+avx512f,+prefer-256-bit"
    assert target_features("+avx2,+prefer-256-bit") == "+avx2,+prefer-256-bit"


def test_kernels_compile_for_the_host_with_256_bit_vectors_preferred():
    probe = _probe()
    features = probe["features"].split(",")
    assert (PREFERENCE in features) == probe["host_avx512"]
    if probe["host_avx512"]:
        assert "+avx512f" in features            # still the host's instruction set


def test_a_target_the_user_chose_is_left_alone():
    assert _probe(NUMBA_CPU_FEATURES="+sse2")["features"] == "+sse2"
    assert PREFERENCE not in _probe(NUMBA_CPU_NAME="generic")["features"].split(",")
