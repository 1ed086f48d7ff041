"""hccl.Comm: a communicator and every collective of the C API on numpy arrays and buffers."""
import ctypes

import numpy as np

from ._lib import COMM_NAME_MAX_LENGTH, ROOT_INFO_BYTES, CommConfig, SendRecvItem, lib
from .buffers import Buf, as_ptr
from .registration import Registration
from .types import ReduceOp, check

SPLIT_NOCOLOR = 0xFFFFFFFF
# HCCL_BATCH_SEND_RECV_MAX of hccl/hccl.h: the most items one batch_send_recv takes.
BATCH_SEND_RECV_MAX = 256
SEND, RECV = 0, 1


class RootInfo:
    """HcclRootInfo: 4108 bytes that one process gets and every rank of the job is given."""

    def __init__(self, raw=None):
        if raw is None:
            buf = ctypes.create_string_buffer(ROOT_INFO_BYTES)
            check(lib.HcclGetRootInfo(buf), "HcclGetRootInfo")
            raw = buf.raw
        if len(raw) != ROOT_INFO_BYTES:
            raise ValueError(f"hccl: a root info has {ROOT_INFO_BYTES} bytes, not {len(raw)}")
        self.raw = bytes(raw)


def get_root_info():
    """Asks the local daemon for a new job (HcclGetRootInfo)."""
    return RootInfo()


def _call(stream, f, name, *args):
    check(f(*args, stream.handle if stream is not None else None), name)


class Comm:
    """An HcclComm. Collectives take numpy arrays or buffer-protocol objects (the data type comes
    from the array, or dtype= names an hccl.DataType, e.g. BFP16 on uint16 storage); outputs
    left out are allocated and returned. With stream= a call returns at once and the stream
    keeps the buffers alive until it is synchronized."""

    def __init__(self, nranks, root_info, rank, config=None, _handle=None):
        """HcclCommInitRootInfo, or HcclCommInitRootInfoConfig with config, a CommConfig or a
        dict of its fields (e.g. {"hcclExecTimeOut": 30})."""
        self.handle = ctypes.c_void_p()
        if _handle is not None:
            self.handle = _handle
            return
        raw = ctypes.create_string_buffer(root_info.raw, ROOT_INFO_BYTES)
        if config is None:
            check(lib.HcclCommInitRootInfo(nranks, raw, rank, ctypes.byref(self.handle)),
                  "HcclCommInitRootInfo")
            return
        if isinstance(config, dict):
            config = CommConfig(**config)
        check(lib.HcclCommInitRootInfoConfig(nranks, raw, rank, ctypes.byref(config),
                                             ctypes.byref(self.handle)),
              "HcclCommInitRootInfoConfig")

    @classmethod
    def from_env(cls):
        """HcclCommInitFromEnv: hccl-run, torchrun, Slurm, Open MPI or a rank table."""
        h = ctypes.c_void_p()
        check(lib.HcclCommInitFromEnv(ctypes.byref(h)), "HcclCommInitFromEnv")
        return cls(0, None, 0, _handle=h)

    @classmethod
    def from_rank_table(cls, path, rank):
        """HcclCommInitClusterInfo."""
        h = ctypes.c_void_p()
        check(
            lib.HcclCommInitClusterInfo(path.encode(), rank, ctypes.byref(h)),
            "HcclCommInitClusterInfo",
        )
        return cls(0, None, 0, _handle=h)

    def split(self, color, key=0):
        """HcclCommSplit: the child of this rank's color, or None for SPLIT_NOCOLOR."""
        h = ctypes.c_void_p()
        check(lib.HcclCommSplit(self.handle, color, key, ctypes.byref(h)), "HcclCommSplit")
        return Comm(0, None, 0, _handle=h) if h.value else None

    def _u32(self, f, name):
        v = ctypes.c_uint32()
        check(f(self.handle, ctypes.byref(v)), name)
        return v.value

    @property
    def rank(self):
        """This process's rank in the comm (HcclGetRankId)."""
        return self._u32(lib.HcclGetRankId, "HcclGetRankId")

    @property
    def size(self):
        """How many ranks the comm has (HcclGetRankSize)."""
        return self._u32(lib.HcclGetRankSize, "HcclGetRankSize")

    @property
    def name(self):
        """The comm's name (HcclGetCommName): hcclCommName of its config, or hcclD's."""
        buf = ctypes.create_string_buffer(COMM_NAME_MAX_LENGTH)
        check(lib.HcclGetCommName(self.handle, buf), "HcclGetCommName")
        return buf.value.decode()

    def async_error(self):
        """HcclGetCommAsyncError, as an int HcclResult (0: none)."""
        v = ctypes.c_int()
        check(lib.HcclGetCommAsyncError(self.handle, ctypes.byref(v)), "HcclGetCommAsyncError")
        return v.value

    def register(self, buf):
        """HcclCommRegister: collectives on buf (a numpy array or buffer-protocol object; a
        CPU torch tensor through .numpy()) skip the staging copy until the returned
        Registration is closed."""
        return Registration(self, buf)

    def destroy(self):
        """HcclCommDestroy; a destroyed or aborted comm is left alone (also on `with` exit)."""
        if self.handle:
            h, self.handle = self.handle, ctypes.c_void_p()
            check(lib.HcclCommDestroy(h), "HcclCommDestroy")

    def abort(self):
        """HcclCommAbort: ops in flight fail at once, and the comm is gone."""
        if self.handle:
            h, self.handle = self.handle, ctypes.c_void_p()
            check(lib.HcclCommAbort(h), "HcclCommAbort")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    # Collectives. Each returns its output; with a stream the output is complete only after
    # stream.synchronize().
    def _out(self, recv, like, count, what):
        if recv is None:
            return Buf(like.like(count), True, like.dtype, what)
        out = Buf(recv, True, like.dtype, what)
        if out.count < count:
            raise ValueError(f"hccl: the {what} holds {out.count} elements, {count} needed")
        return out

    def _hold(self, stream, *bufs):
        if stream is not None:
            stream.hold(*bufs)

    def all_reduce(self, send, recv=None, op=ReduceOp.SUM, stream=None, dtype=None,
                   algorithm=None):
        """algorithm: the level-1 algorithm between daemons for this call alone (an
        hccl.Algorithm or an HCCL_ALGO name; HcclAllReduceAlgo), None: the comm's choice."""
        s = Buf(send, False, dtype, "send buffer")
        r = self._out(recv, s, s.count, "receive buffer")
        if algorithm is None:
            _call(stream, lib.HcclAllReduce, "HcclAllReduce", as_ptr(s), as_ptr(r), s.count,
                  s.dtype, int(op), self.handle)
        else:
            name = getattr(algorithm, "value", algorithm).encode()
            _call(stream, lib.HcclAllReduceAlgo, "HcclAllReduceAlgo", as_ptr(s), as_ptr(r),
                  s.count, s.dtype, int(op), name, self.handle)
        self._hold(stream, s, r)
        return r.array

    def broadcast(self, buf, root, stream=None, dtype=None):
        """Copies root's buf into every rank's buf, in place (HcclBroadcast); returns buf."""
        b = Buf(buf, True, dtype, "buffer")
        _call(stream, lib.HcclBroadcast, "HcclBroadcast", as_ptr(b), b.count, b.dtype, root,
              self.handle)
        self._hold(stream, b)
        return b.array

    def all_gather(self, send, recv=None, stream=None, dtype=None):
        """Every rank's send, in rank order, into recv (size * len(send) elements; allocated
        and returned when left out) (HcclAllGather)."""
        s = Buf(send, False, dtype, "send buffer")
        r = self._out(recv, s, s.count * self.size, "receive buffer")
        _call(stream, lib.HcclAllGather, "HcclAllGather", as_ptr(s), as_ptr(r), s.count, s.dtype,
              self.handle)
        self._hold(stream, s, r)
        return r.array

    def reduce_scatter(self, send, recv=None, op=ReduceOp.SUM, stream=None, dtype=None):
        """send (size equal blocks) reduced across the ranks; block r into rank r's recv
        (allocated and returned when left out) (HcclReduceScatter)."""
        s = Buf(send, False, dtype, "send buffer")
        n = self.size
        if s.count % n != 0:
            raise ValueError(f"hccl: reduce_scatter of {s.count} elements over {n} ranks")
        r = self._out(recv, s, s.count // n, "receive buffer")
        _call(stream, lib.HcclReduceScatter, "HcclReduceScatter", as_ptr(s), as_ptr(r),
              s.count // n, s.dtype, int(op), self.handle)
        self._hold(stream, s, r)
        return r.array

    def all_to_all(self, send, recv=None, stream=None, dtype=None):
        """Block q of send (size equal blocks) goes to rank q; recv's block q comes from rank q
        (allocated and returned when left out) (HcclAlltoAll)."""
        s = Buf(send, False, dtype, "send buffer")
        n = self.size
        if s.count % n != 0:
            raise ValueError(f"hccl: all_to_all of {s.count} elements over {n} ranks")
        r = self._out(recv, s, s.count, "receive buffer")
        c = s.count // n
        _call(stream, lib.HcclAlltoAll, "HcclAlltoAll", as_ptr(s), c, s.dtype, as_ptr(r), c,
              s.dtype, self.handle)
        self._hold(stream, s, r)
        return r.array

    def all_to_all_v(self, send, send_counts, send_displs, recv, recv_counts, recv_displs,
                     stream=None, dtype=None):
        """HcclAlltoAllV: counts and displacements in elements, one per rank."""
        s = Buf(send, False, dtype, "send buffer")
        r = Buf(recv, True, s.dtype, "receive buffer")
        v, ptr = self._counts("all_to_all_v", send_counts, send_displs, recv_counts,
                              recv_displs)
        _call(stream, lib.HcclAlltoAllV, "HcclAlltoAllV", as_ptr(s), ptr[0], ptr[1], s.dtype,
              as_ptr(r), ptr[2], ptr[3], s.dtype, self.handle)
        self._hold(stream, s, r, *v)
        return r.array

    def _counts(self, what, *arrays):
        v = [np.ascontiguousarray(x, dtype=np.uint64) for x in arrays]
        if any(len(x) != self.size for x in v):
            raise ValueError(f"hccl: {what} takes one count and displacement per rank")
        return v, [ctypes.c_void_p(x.ctypes.data) for x in v]

    def all_gather_v(self, send, recv, recv_counts, recv_displs, stream=None, dtype=None):
        """HcclAllGatherV: rank q's send lands at recv_displs[q] (recv_counts[q] elements, this
        rank's own being send's size); the same arrays on every rank."""
        s = Buf(send, False, dtype, "send buffer")
        r = Buf(recv, True, s.dtype, "receive buffer")
        v, ptr = self._counts("all_gather_v", recv_counts, recv_displs)
        _call(stream, lib.HcclAllGatherV, "HcclAllGatherV", as_ptr(s), s.count, as_ptr(r),
              ptr[0], ptr[1], s.dtype, self.handle)
        self._hold(stream, s, r, *v)
        return r.array

    def reduce_scatter_v(self, send, send_counts, send_displs, recv, op=ReduceOp.SUM,
                         stream=None, dtype=None):
        """HcclReduceScatterV: recv gets the reduction of every rank's block for this rank
        (send_counts[rank] elements at send_displs[rank]); the same arrays on every rank."""
        s = Buf(send, False, dtype, "send buffer")
        r = Buf(recv, True, s.dtype, "receive buffer")
        v, ptr = self._counts("reduce_scatter_v", send_counts, send_displs)
        _call(stream, lib.HcclReduceScatterV, "HcclReduceScatterV", as_ptr(s), ptr[0], ptr[1],
              as_ptr(r), r.count, s.dtype, int(op), self.handle)
        self._hold(stream, s, r, *v)
        return r.array

    def reduce(self, send, recv=None, op=ReduceOp.SUM, root=0, stream=None, dtype=None):
        """send reduced across the ranks into root's recv (allocated and returned when left
        out; the other ranks' is left as it was) (HcclReduce)."""
        s = Buf(send, False, dtype, "send buffer")
        r = self._out(recv, s, s.count, "receive buffer")
        _call(stream, lib.HcclReduce, "HcclReduce", as_ptr(s), as_ptr(r), s.count, s.dtype,
              int(op), root, self.handle)
        self._hold(stream, s, r)
        return r.array

    def scatter(self, send, recv, root=0, stream=None, dtype=None):
        """HcclScatter: the root's send holds size x recv's count elements; others' is ignored."""
        r = Buf(recv, True, dtype, "receive buffer")
        s = Buf(send, False, r.dtype, "send buffer") if send is not None else None
        _call(stream, lib.HcclScatter, "HcclScatter", as_ptr(s) if s else None, as_ptr(r),
              r.count, r.dtype, root, self.handle)
        self._hold(stream, s, r)
        return r.array

    def barrier(self, stream=None):
        """Returns once every rank has called it (HcclBarrier)."""
        _call(stream, lib.HcclBarrier, "HcclBarrier", self.handle)

    def send(self, buf, dest, stream=None, dtype=None):
        """Sends buf to rank dest, whose recv of the same size takes it (HcclSend)."""
        b = Buf(buf, False, dtype, "send buffer")
        _call(stream, lib.HcclSend, "HcclSend", as_ptr(b), b.count, b.dtype, dest, self.handle)
        self._hold(stream, b)

    def recv(self, buf, src, stream=None, dtype=None):
        """Receives rank src's send into buf (HcclRecv); returns buf."""
        b = Buf(buf, True, dtype, "receive buffer")
        _call(stream, lib.HcclRecv, "HcclRecv", as_ptr(b), b.count, b.dtype, src, self.handle)
        self._hold(stream, b)
        return b.array

    def batch_send_recv(self, items, stream=None):
        """HcclBatchSendRecv of (hccl.SEND or hccl.RECV, buffer, peer) tuples, all in flight at
        once: no ordering between them, no deadlock. At most BATCH_SEND_RECV_MAX items
        (ValueError beyond)."""
        if len(items) > BATCH_SEND_RECV_MAX:
            raise ValueError(f"a batch of {len(items)} sends and receives: at most "
                             f"{BATCH_SEND_RECV_MAX}, all in flight at once (split it where "
                             "no item waits for a later one)")
        bufs = [Buf(b, kind == RECV, None, "buffer") for kind, b, _ in items]
        arr = (SendRecvItem * len(items))()
        for i, ((kind, _, peer), b) in enumerate(zip(items, bufs)):
            arr[i] = SendRecvItem(kind, b.ptr, b.count, b.dtype, peer)
        _call(stream, lib.HcclBatchSendRecv, "HcclBatchSendRecv", arr, len(items), self.handle)
        self._hold(stream, arr, *bufs)
