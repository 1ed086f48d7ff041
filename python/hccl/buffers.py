"""Buffers handed to libhccl: numpy arrays, or anything with the buffer protocol, used in place."""
import ctypes

import numpy as np

from .types import ITEMSIZE, DataType, data_type


class Buf:
    """A contiguous view of a user buffer: its address, element count and HcclDataType. It holds
    a reference to the buffer so that an operation in flight keeps it alive."""

    __slots__ = ("array", "ptr", "count", "dtype")

    def __init__(self, obj, writable, dtype=None, what="buffer"):
        arr = obj if isinstance(obj, np.ndarray) else np.asarray(memoryview(obj))
        if not arr.flags.c_contiguous:
            if writable:
                raise ValueError(f"hccl: the {what} must be contiguous (np.ascontiguousarray)")
            arr = np.ascontiguousarray(arr)
        if writable and not arr.flags.writeable:
            raise ValueError(f"hccl: the {what} is read-only")
        self.dtype = DataType(dtype) if dtype is not None else data_type(arr.dtype)
        size = ITEMSIZE[self.dtype]
        if arr.nbytes % size != 0:
            raise ValueError(
                f"hccl: the {what} holds {arr.nbytes} bytes, not whole {self.dtype.name}")
        self.array = arr
        self.count = arr.nbytes // size
        self.ptr = arr.ctypes.data if arr.nbytes else None

    def like(self, count):
        """A new array for count elements of this buffer's type (outputs made here)."""
        size = ITEMSIZE[self.dtype]
        if self.array.itemsize == size:
            return np.empty(count, dtype=self.array.dtype)
        return np.empty(count * size, dtype=np.uint8)


def as_ptr(buf):
    return ctypes.c_void_p(buf.ptr) if buf.ptr is not None else None
