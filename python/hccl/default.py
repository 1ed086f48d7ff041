"""Calls on the process's default comm, as the HCCL articles write them:

    import hccl
    hccl.initialize()                                   # under hccl-run, torchrun, mpirun; or
                                                        # after dist.init_process_group("hccl")
    hccl.set_allreduce_algorithm(hccl.Algorithm.MESH)   # every later hccl.all_reduce*
    hccl.all_reduce(tensor)                             # in place, SUM
    hccl.all_reduce(tensor, algorithm=hccl.Algorithm.RING)   # this call alone
    handle = hccl.all_reduce_async(bucket_grad)         # returns at once
    handle.wait()

Tensors are CPU torch tensors or numpy arrays, reduced in place. The algorithm is the level-1
one between daemons (HcclAllReduceAlgo); every rank must ask the same, or every rank gets
HcclError HCCL_E_PARA. set_allreduce_algorithm applies to this module's all_reduce and
all_reduce_async only: Comm.all_reduce and torch.distributed keep the comm's choice (HCCL_ALGO,
hcclAlgo, the cost model). With torch's default group of backend "hccl", the calls run on that
group's comm in order with its other ops; otherwise on a comm of their own (Comm.from_env), the
async ones on a stream.
"""
import enum
import sys

from .comm import Comm
from .stream import Stream
from .types import ReduceOp


class Algorithm(str, enum.Enum):
    """Level-1 algorithms (HCCL_ALGO's names)."""

    RING = "ring"
    MESH = "fullmesh"
    RHD = "H-D_R"  # recursive halving-doubling
    TREE = "tree"
    PAIRWISE = "pairwise"  # all-to-all only
    NB = "NB"  # nonuniform Bruck: allreduce, allgather, reduce-scatter, barrier
    NHR = "NHR"  # nonuniform hierarchical ring: the same collectives


_S = {"comm": None, "pg": None, "algo": None, "stream": None}


def _torch_group():
    """torch's default process group when it is one of backend "hccl", else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    from .torch import ProcessGroupHCCL  # pylint: disable=import-outside-toplevel
    pg = dist.distributed_c10d._get_default_group()  # pylint: disable=protected-access
    return pg if isinstance(pg, ProcessGroupHCCL) else None


def initialize(comm=None):
    """The comm the module's calls use, returned: comm if given; else torch's default group's
    when torch.distributed was initialized with backend "hccl"; else one made from the launcher's
    environment (Comm.from_env). A second call returns the first one's."""
    if comm is not None:
        _S.update(comm=comm, pg=None)
    elif _S["comm"] is None:
        pg = _torch_group()
        _S.update(comm=pg.comm if pg is not None else Comm.from_env(), pg=pg)
    return _S["comm"]


def set_allreduce_algorithm(algorithm):
    """The level-1 algorithm of every later all_reduce and all_reduce_async of this module that
    names none (an Algorithm or an HCCL_ALGO name; None: the comm's choice again)."""
    _S["algo"] = None if algorithm is None else Algorithm(algorithm)


class Handle:
    """What all_reduce_async returns: wait() returns the tensor once reduced (raising the op's
    error), is_completed() says whether it is."""

    def __init__(self, tensor, work=None, stream=None, finish=None):
        self._tensor, self._work, self._stream, self._finish = tensor, work, stream, finish

    def wait(self):
        if self._work is not None:
            self._work.wait()
        elif self._stream is not None:
            self._stream.synchronize()
            self._stream = None
        if self._finish is not None:
            finish, self._finish = self._finish, None
            finish()
        return self._tensor

    def is_completed(self):
        if self._work is not None:
            return self._work.is_completed()
        return self._stream is None or self._stream.query()


def _buffer(t):
    """(array, HcclDataType or None, finish): numpy's own, or a torch tensor's (staged when not
    contiguous; finish copies the result back)."""
    if type(t).__module__.startswith("torch"):
        from .torch_tensors import Staged  # pylint: disable=import-outside-toplevel
        s = Staged(t, "all_reduce")
        return s.array, s.hccl_dtype, s.done
    return t, None, None


def _issue(t, op, algorithm, wait):
    comm = initialize()
    algo = _S["algo"] if algorithm is None else Algorithm(algorithm)
    array, dtype, finish = _buffer(t)
    if str(getattr(t, "dtype", "")) == "torch.bool":  # as the torch backend: SUM is OR
        op = {ReduceOp.SUM: ReduceOp.MAX, ReduceOp.PROD: ReduceOp.MIN}.get(op, op)
    pg = _S["pg"]
    if pg is not None:
        def run():
            comm.all_reduce(array, array, op, dtype=dtype, algorithm=algo)
            if finish is not None:
                finish()

        return Handle(t, work=pg._submit("all_reduce", run, [t], inline=wait))  # noqa
    if wait:
        comm.all_reduce(array, array, op, dtype=dtype, algorithm=algo)
        return Handle(t, finish=finish)
    if _S["stream"] is None:
        _S["stream"] = Stream()
    comm.all_reduce(array, array, op, stream=_S["stream"], dtype=dtype, algorithm=algo)
    return Handle(t, stream=_S["stream"], finish=finish)


def all_reduce(tensor, op=ReduceOp.SUM, algorithm=None):
    """Reduces tensor in place across the default comm's ranks and returns it; algorithm: the
    level-1 algorithm for this call (None: set_allreduce_algorithm's, else the comm's)."""
    return _issue(tensor, op, algorithm, True).wait()


def all_reduce_async(tensor, op=ReduceOp.SUM, algorithm=None):
    """all_reduce issued at once; returns a Handle whose wait() completes it."""
    return _issue(tensor, op, algorithm, False)
