"""HCCL's enums as Python values, numpy dtypes mapped to HcclDataType, and HcclError."""
import enum

import numpy as np

from ._lib import lib


class Result(enum.IntEnum):
    """HcclResult."""

    SUCCESS = 0
    E_PARA = 1
    E_PTR = 2
    E_MEMORY = 3
    E_INTERNAL = 4
    E_NOT_SUPPORT = 5
    E_NOT_FOUND = 6
    E_UNAVAIL = 7
    E_SYSCALL = 8
    E_TIMEOUT = 9
    E_OPEN_FILE_FAILURE = 10
    E_TCP_CONNECT = 11
    E_ROCE_CONNECT = 12
    E_TCP_TRANSFER = 13
    E_ROCE_TRANSFER = 14
    E_RUNTIME = 15
    E_DRV = 16
    E_PROFILING = 17
    E_CCE = 18
    E_NETWORK = 19
    E_AGAIN = 20
    E_REMOTE = 21
    E_SUSPENDING = 22
    E_OPRETRY_FAIL = 23
    E_OOM = 24


class DataType(enum.IntEnum):
    """HcclDataType."""

    INT8 = 0
    INT16 = 1
    INT32 = 2
    FP16 = 3
    FP32 = 4
    INT64 = 5
    UINT64 = 6
    UINT8 = 7
    UINT16 = 8
    UINT32 = 9
    FP64 = 10
    BFP16 = 11


class ReduceOp(enum.IntEnum):
    """HcclReduceOp."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3


class HcclError(RuntimeError):
    """A call that did not return HCCL_SUCCESS: .result is the HcclResult, .name its name."""

    def __init__(self, result, call):
        self.result = Result(result) if result in Result._value2member_map_ else result
        self.name = "HCCL_" + self.result.name if isinstance(self.result, Result) else str(result)
        self.call = call
        text = lib.HcclGetErrorString(int(result)).decode()
        super().__init__(f"{call}: {text} ({int(result)})")


def check(rc, call):
    if rc != 0:
        raise HcclError(rc, call)


_NUMPY = {
    np.dtype(np.int8): DataType.INT8,
    np.dtype(np.int16): DataType.INT16,
    np.dtype(np.int32): DataType.INT32,
    np.dtype(np.float16): DataType.FP16,
    np.dtype(np.float32): DataType.FP32,
    np.dtype(np.int64): DataType.INT64,
    np.dtype(np.uint64): DataType.UINT64,
    np.dtype(np.uint8): DataType.UINT8,
    np.dtype(np.uint16): DataType.UINT16,
    np.dtype(np.uint32): DataType.UINT32,
    np.dtype(np.float64): DataType.FP64,
}

ITEMSIZE = {
    DataType.INT8: 1,
    DataType.UINT8: 1,
    DataType.INT16: 2,
    DataType.UINT16: 2,
    DataType.FP16: 2,
    DataType.BFP16: 2,
    DataType.INT32: 4,
    DataType.UINT32: 4,
    DataType.FP32: 4,
    DataType.INT64: 8,
    DataType.UINT64: 8,
    DataType.FP64: 8,
}


def data_type(dtype):
    """The HcclDataType of a numpy dtype; TypeError if HCCL has none."""
    t = _NUMPY.get(np.dtype(dtype))
    if t is None:
        raise TypeError(f"hccl: no HcclDataType for {np.dtype(dtype)}")
    return t
