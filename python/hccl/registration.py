"""Comm.register: ordinary memory that collectives use in place, without the staging copy
(HcclCommRegister, as NCCL's ncclCommRegister)."""
import ctypes

import numpy as np

from ._lib import lib
from .types import check


class Registration:
    """A buffer registered with a comm: collectives on it skip the staging copy. It holds the
    buffer, so its memory stays while registered; close() (or the end of a with block) gives
    the pages back (HcclCommDeregister), and the comm's destroy() deregisters what is left.
    Register a buffer that many ops reuse (a gradient bucket), while no other thread writes it."""

    def __init__(self, comm, obj):
        arr = obj if isinstance(obj, np.ndarray) else np.asarray(memoryview(obj))
        if not arr.flags.c_contiguous or arr.nbytes == 0:
            raise ValueError("hccl: register a contiguous buffer of at least one byte")
        self.comm = comm
        self.array = arr
        self.handle = ctypes.c_void_p()
        check(lib.HcclCommRegister(comm.handle, ctypes.c_void_p(arr.ctypes.data), arr.nbytes,
                                   ctypes.byref(self.handle)), "HcclCommRegister")

    def close(self):
        if self.handle:
            h, self.handle = self.handle, ctypes.c_void_p()
            if self.comm.handle:  # a destroyed comm deregistered it already
                check(lib.HcclCommDeregister(self.comm.handle, h), "HcclCommDeregister")
        self.array = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
