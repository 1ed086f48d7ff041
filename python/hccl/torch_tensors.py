"""CPU tensors as the buffers libhccl takes: dtype mapping, reduce ops, contiguous staging."""
import torch
import torch.distributed as dist

from .types import DataType, ReduceOp

# torch dtype -> (the storage view handed to libhccl, its HcclDataType or None: numpy's)
_DTYPES = {
    torch.float32: (torch.float32, None),
    torch.float64: (torch.float64, None),
    torch.float16: (torch.float16, None),
    torch.bfloat16: (torch.int16, DataType.BFP16),
    torch.int8: (torch.int8, None),
    torch.uint8: (torch.uint8, None),
    torch.int16: (torch.int16, None),
    torch.int32: (torch.int32, None),
    torch.int64: (torch.int64, None),
    torch.bool: (torch.uint8, None),
}

_OPS = {
    dist.ReduceOp.SUM: ReduceOp.SUM,
    dist.ReduceOp.PRODUCT: ReduceOp.PROD,
    dist.ReduceOp.MIN: ReduceOp.MIN,
    dist.ReduceOp.MAX: ReduceOp.MAX,
    dist.ReduceOp.AVG: ReduceOp.SUM,  # then divided by the group's size
}


# Tensors libhccl reduces as they are (bool is not: its SUM is MAX): HcclDataType, element size.
_DIRECT = {
    torch.float32: (int(DataType.FP32), 4),
    torch.float64: (int(DataType.FP64), 8),
    torch.float16: (int(DataType.FP16), 2),
    torch.bfloat16: (int(DataType.BFP16), 2),
    torch.int8: (int(DataType.INT8), 1),
    torch.uint8: (int(DataType.UINT8), 1),
    torch.int16: (int(DataType.INT16), 2),
    torch.int32: (int(DataType.INT32), 4),
    torch.int64: (int(DataType.INT64), 8),
}
# HcclReduceOp by int(torch's RedOpType); AVG and the bitwise ops are not direct.
_RED = dist.ReduceOp.RedOpType
_DIRECT_OPS = {int(_RED.SUM): int(ReduceOp.SUM), int(_RED.PRODUCT): int(ReduceOp.PROD),
               int(_RED.MIN): int(ReduceOp.MIN), int(_RED.MAX): int(ReduceOp.MAX)}
_SUM = int(ReduceOp.SUM)


# The bitwise reduce ops: HCCL has none, so they run as an all_gather and a fold here.
_BITWISE = {int(_RED.BAND): ("BAND", torch.bitwise_and), int(_RED.BOR): ("BOR", torch.bitwise_or),
            int(_RED.BXOR): ("BXOR", torch.bitwise_xor)}
_INTEGRAL = (torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def _op_type(op):
    """int(RedOpType) of a ReduceOp or of a RedOpType (dist.ReduceOp.SUM is the latter)."""
    return int(op.op) if hasattr(op, "op") else int(op)


def bitwise(op, dtype, what):
    """torch's function for the bitwise reduce op op (BAND, BOR, BXOR) on integer and bool
    tensors, or None when op is another one."""
    name, fold = _BITWISE.get(_op_type(op), (None, None))
    if fold is not None and dtype not in _INTEGRAL:
        raise RuntimeError(f"hccl {what}: ReduceOp.{name} needs an integer or bool tensor, "
                           f"got {dtype}")
    return fold


def direct(t, opts):
    """(address, count, HcclDataType, HcclReduceOp, bytes) when libhccl can reduce tensor t in
    place as it is, with the reduce op of opts (an AllreduceOptions or None): a contiguous dense
    CPU tensor of a plain dtype, SUM, PRODUCT, MIN or MAX. Otherwise None (and the caller
    stages it)."""
    kind = _DIRECT.get(t.dtype) if isinstance(t, torch.Tensor) else None
    if kind is None or not t.is_cpu or t.layout is not torch.strided or not t.is_contiguous():
        return None
    count = t.numel()
    op = _SUM if opts is None else _DIRECT_OPS.get(int(opts.reduceOp.op))
    if op is None:
        return None
    return t.data_ptr(), count, kind[0], op, count * kind[1]


def check_tensor(t, what):
    if not isinstance(t, torch.Tensor):
        raise RuntimeError(f"hccl {what}: expected a tensor, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise RuntimeError(
            f"hccl {what}: only CPU tensors (host memory) are served, got {t.device}")
    if t.dtype not in _DTYPES:
        raise RuntimeError(f"hccl {what}: the dtype {t.dtype} is not supported (HCCL has no such "
                           "data type)")
    if t.is_sparse:
        raise RuntimeError(f"hccl {what}: sparse tensors are not supported")


def reduce_op(op, dtype, what):
    """The HcclReduceOp of a torch ReduceOp (bool: SUM is MAX and PRODUCT is MIN, as NCCL does)."""
    if _op_type(op) == int(_RED.PREMUL_SUM):
        raise RuntimeError(f"hccl {what}: ReduceOp.PREMUL_SUM is not supported: torch 1.13 does "
                           "not hand its factor to a backend written in Python (multiply by the "
                           "factor, then SUM)")
    if op not in _OPS:
        raise RuntimeError(f"hccl {what}: the reduce op {op} is not supported (SUM, PRODUCT, MIN, "
                           "MAX, AVG, BAND, BOR, BXOR)")
    if dtype == torch.bool:
        if op == dist.ReduceOp.AVG:
            raise RuntimeError(f"hccl {what}: AVG of bool tensors is undefined")
        return {dist.ReduceOp.SUM: ReduceOp.MAX, dist.ReduceOp.PRODUCT: ReduceOp.MIN}.get(
            op, _OPS[op])
    return _OPS[op]


def finish_avg(op, tensors, size):
    if op != dist.ReduceOp.AVG:
        return
    for t in tensors:
        if t.is_floating_point():
            t.div_(size)
        else:
            t.copy_(torch.div(t, size, rounding_mode="trunc"))


class Staged:
    """A tensor as a contiguous numpy view for libhccl; a non-contiguous one is copied into a
    staging tensor (in) and back (out, by done())."""

    def __init__(self, t, what):
        check_tensor(t, what)
        self.tensor = t
        self.work = t if t.is_contiguous() else t.contiguous()
        view_dtype, self.hccl_dtype = _DTYPES[t.dtype]
        flat = self.work.detach().reshape(-1)
        self.array = (flat.view(view_dtype) if view_dtype != t.dtype else flat).numpy()

    def done(self):
        if self.work is not self.tensor:
            self.tensor.copy_(self.work)
