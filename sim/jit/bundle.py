"""A one-field numba StructRef used to pass (model arrays, workspace) to kernels as a single object.

Numba types and unboxes every argument of a call from Python, which for a named tuple of about a hundred
arrays costs far more per call than one StructRef holding the same tuple.

Its items are read with :func:`borrowed_items` inside a kernel compiled without numba's reference counting
(``sim.jit.kernel.kernel``), not with ``bundle.items`` in a function that has it: there, reading the field takes a
reference to every array of the tuple (the model's, the workspace's, the tick's) and releases it at the
end, two atomic operations through two calls per array, which the reference-count pruning does not remove
around a call into the step. The entry functions that Python calls only pass the bundle on.
"""
from __future__ import annotations

from numba import njit, types
from numba.core import cgutils
from numba.core.runtime.nrtdynmod import _meminfo_struct_type
from numba.experimental import structref
from numba.extending import intrinsic


@structref.register
class BundleType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class Bundle(structref.StructRefProxy):
    """``Bundle(items)``: holds any numba-typable value, here ``(ModelArrays, PlantWork)``."""


structref.define_proxy(Bundle, BundleType, ["items"])


@njit(cache=True)
def new_bundle(items):
    """``Bundle(items)`` built in a cached kernel: the proxy's own constructor is compiled afresh in every
    process (numba does not cache it), which costs seconds per worker of a sweep."""
    return Bundle(items)


MEMINFO_DATA_FIELD = 3
"""Position of the data pointer in numba's MemInfo struct (``_meminfo_struct_type``: refcount, destructor,
its argument, data, size, allocator)."""


@intrinsic
def borrowed_items(typingctx, bundle):
    """``bundle.items`` without taking references: for kernels compiled without reference counting only (in a
    function with it, the value would be released at the end without having been taken). The bundle is kept
    alive by its caller, which holds it for the call."""
    items_type = bundle.field_dict["items"]
    payload_type = bundle.get_data_type()

    def codegen(context, builder, signature, args):
        meminfo = cgutils.create_struct_proxy(bundle)(context, builder, value=args[0]).meminfo
        info = builder.bitcast(meminfo, _meminfo_struct_type.as_pointer())
        data = builder.load(cgutils.gep(builder, info, 0, MEMINFO_DATA_FIELD))
        payload = context.data_model_manager[payload_type].get_value_type()
        data = builder.bitcast(data, payload.as_pointer())
        return cgutils.create_struct_proxy(payload_type)(context, builder, ref=data).items

    return items_type(bundle), codegen
