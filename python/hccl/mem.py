"""HcclMemAlloc as a numpy array: collectives on it skip the staging copy (zero copy)."""
import ctypes
import weakref

import numpy as np

from ._lib import lib
from .types import check


def mem_alloc(shape, dtype=np.float32):
    """A numpy array in the arena this process shares with its daemon. The memory goes back
    (HcclMemFree) when the array and every view of it are gone."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = max(count * dtype.itemsize, 1)
    ptr = ctypes.c_void_p()
    check(lib.HcclMemAlloc(ctypes.byref(ptr), nbytes), "HcclMemAlloc")
    raw = (ctypes.c_char * nbytes).from_address(ptr.value)
    arr = np.frombuffer(raw, dtype=np.uint8, count=count * dtype.itemsize).view(dtype)
    arr = arr.reshape(shape)
    # The ctypes object backs every view (their .base chain ends there): free with it.
    weakref.finalize(raw, lib.HcclMemFree, ctypes.c_void_p(ptr.value))
    return arr
