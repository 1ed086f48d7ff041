"""hccl: Python over libhccl.so, hcclD's HCCL API (docs: README, "Python").

    import hccl, numpy as np
    root = hccl.get_root_info()              # one process; send root.raw to every rank
    comm = hccl.Comm(nranks, root, rank)     # or hccl.Comm.from_env() under hccl-run/torchrun
    out = comm.all_reduce(np.ones(4, np.float32))
"""
__version__ = "0.1.0"  # the Makefile's VERSION (tests/python/test_cli.py holds them equal)

from ._lib import CommConfig
from .comm import BATCH_SEND_RECV_MAX, RECV, SEND, SPLIT_NOCOLOR, Comm, RootInfo, get_root_info
from .default import (Algorithm, all_reduce, all_reduce_async, initialize,
                      set_allreduce_algorithm)
from .mem import mem_alloc
from .stream import Stream
from .types import DataType, HcclError, ReduceOp, Result, data_type

SUM, PROD, MAX, MIN = ReduceOp.SUM, ReduceOp.PROD, ReduceOp.MAX, ReduceOp.MIN

__all__ = [
    "__version__",
    "Algorithm",
    "BATCH_SEND_RECV_MAX",
    "Comm",
    "CommConfig",
    "DataType",
    "HcclError",
    "MAX",
    "MIN",
    "PROD",
    "RECV",
    "ReduceOp",
    "Result",
    "RootInfo",
    "SEND",
    "SPLIT_NOCOLOR",
    "SUM",
    "Stream",
    "all_reduce",
    "all_reduce_async",
    "data_type",
    "get_root_info",
    "initialize",
    "mem_alloc",
    "set_allreduce_algorithm",
]
