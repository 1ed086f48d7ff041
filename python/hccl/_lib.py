"""libhccl.so through ctypes: finding the library and declaring the C functions it exports."""
import ctypes
import os

ROOT_INFO_BYTES = 4108
COMM_NAME_MAX_LENGTH = 128


def _candidates():
    env = os.environ.get("HCCL_LIB")
    if env:
        yield env
    here = os.path.dirname(os.path.abspath(__file__))
    # A source tree: python/hccl/ beside build/lib/.
    yield os.path.join(here, "..", "..", "build", "lib", "libhccl.so.0")
    # make install: PREFIX/lib/python3.X/dist-packages/hccl/ under PREFIX/lib/.
    yield os.path.join(here, "..", "..", "..", "libhccl.so.0")
    yield "libhccl.so.0"


def _load():
    errors = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
    raise ImportError("hccl: cannot load libhccl.so.0 (set HCCL_LIB): " + "; ".join(errors))


lib = _load()

_p = ctypes.c_void_p
_u32 = ctypes.c_uint32
_u64 = ctypes.c_uint64
_i = ctypes.c_int

# name: (argument types); every one returns an HcclResult.
_SIGNATURES = {
    "HcclGetRootInfo": [_p],
    "HcclCommInitRootInfo": [_u32, _p, _u32, ctypes.POINTER(_p)],
    "HcclCommInitRootInfoConfig": [_u32, _p, _u32, _p, ctypes.POINTER(_p)],
    "HcclCommInitClusterInfo": [ctypes.c_char_p, _u32, ctypes.POINTER(_p)],
    "HcclCommInitFromEnv": [ctypes.POINTER(_p)],
    "HcclCommDestroy": [_p],
    "HcclCommAbort": [_p],
    "HcclCommSplit": [_p, _u32, _u32, ctypes.POINTER(_p)],
    "HcclGetRankSize": [_p, ctypes.POINTER(_u32)],
    "HcclGetRankId": [_p, ctypes.POINTER(_u32)],
    "HcclGetCommName": [_p, ctypes.c_char_p],
    "HcclGetCommAsyncError": [_p, ctypes.POINTER(_i)],
    "HcclAllReduce": [_p, _p, _u64, _i, _i, _p, _p],
    "HcclAllReduceAlgo": [_p, _p, _u64, _i, _i, ctypes.c_char_p, _p, _p],
    "HcclBroadcast": [_p, _u64, _i, _u32, _p, _p],
    "HcclAllGather": [_p, _p, _u64, _i, _p, _p],
    "HcclReduceScatter": [_p, _p, _u64, _i, _i, _p, _p],
    "HcclAlltoAll": [_p, _u64, _i, _p, _u64, _i, _p, _p],
    "HcclAlltoAllV": [_p, _p, _p, _i, _p, _p, _p, _i, _p, _p],
    "HcclReduce": [_p, _p, _u64, _i, _i, _u32, _p, _p],
    "HcclAllGatherV": [_p, _u64, _p, _p, _p, _i, _p, _p],
    "HcclReduceScatterV": [_p, _p, _p, _p, _u64, _i, _i, _p, _p],
    "HcclScatter": [_p, _p, _u64, _i, _u32, _p, _p],
    "HcclBarrier": [_p, _p],
    "HcclSend": [_p, _u64, _i, _u32, _p, _p],
    "HcclRecv": [_p, _u64, _i, _u32, _p, _p],
    "HcclBatchSendRecv": [_p, _u32, _p, _p],
    "HcclStreamCreate": [ctypes.POINTER(_p)],
    "HcclStreamSynchronize": [_p],
    "HcclStreamQuery": [_p],
    "HcclStreamDestroy": [_p],
    "HcclMemAlloc": [ctypes.POINTER(_p), ctypes.c_size_t],
    "HcclMemFree": [_p],
    "HcclCommRegister": [_p, _p, _u64, ctypes.POINTER(_p)],
    "HcclCommDeregister": [_p, _p],
}

for _name, _args in _SIGNATURES.items():
    _f = getattr(lib, _name)
    _f.argtypes = _args
    _f.restype = _i

lib.HcclGetErrorString.argtypes = [_i]
lib.HcclGetErrorString.restype = ctypes.c_char_p


class SendRecvItem(ctypes.Structure):
    """HcclSendRecvItem."""

    _fields_ = [
        ("sendRecvType", _i),
        ("buf", _p),
        ("count", _u64),
        ("dataType", _i),
        ("remoteRank", _u32),
    ]


NOT_SET_U32 = 0xFFFFFFFF


class CommConfig(ctypes.Structure):
    """HcclCommConfig, HCCL's layout (libclient/include/hccl/hccl.h). CommConfig(**fields) is
    HcclCommConfigInit's result ("not set" everywhere) with the named fields set, e.g.
    CommConfig(hcclExecTimeOut=30, hcclCommName=b"tp", hcclRetryParams="MaxCnt:3, HoldTime:5000,
    IntervalTime:1000")."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magicWord", _u32),
        ("version", _u32),
        ("reserved", _u64),
        ("hcclBufferSize", _u32),
        ("hcclDeterministic", _u32),
        ("hcclCommName", ctypes.c_char * COMM_NAME_MAX_LENGTH),
        ("hcclUdi", ctypes.c_char * 128),
        ("hcclOpExpansionMode", _u32),
        ("hcclRdmaTrafficClass", _u32),
        ("hcclRdmaServiceLevel", _u32),
        ("hcclWorldRankID", _u32),
        ("hcclJobID", _u64),
        ("aclGraphZeroCopyEnable", ctypes.c_uint8),
        ("hcclExecTimeOut", ctypes.c_int32),
        ("hcclAlgo", ctypes.c_char * 1600),
        ("hcclRetryEnable", ctypes.c_char * 50),
        ("hcclRetryParams", ctypes.c_char * 128),
        ("hcclBufferName", ctypes.c_char * 128),
        ("hcclQos", _u32),
        ("hcclSymWinMaxMemSizePerRank", _u64),
        ("hcclChannelSqDepth", _u32),
    ]

    def __init__(self, **fields):
        super().__init__()
        self.size, self.magicWord, self.version = ctypes.sizeof(self), 0xF0F0F0F0, 11
        for f in ("hcclBufferSize", "hcclDeterministic", "hcclRdmaTrafficClass",
                  "hcclRdmaServiceLevel", "hcclQos", "hcclChannelSqDepth"):
            setattr(self, f, NOT_SET_U32)
        self.hcclExecTimeOut = -1
        self.hcclSymWinMaxMemSizePerRank = 16
        for k, v in fields.items():
            if k not in {f[0] for f in self._fields_[4:]}:
                raise TypeError(f"hccl: HcclCommConfig has no field {k}")
            setattr(self, k, v.encode() if isinstance(v, str) else v)
