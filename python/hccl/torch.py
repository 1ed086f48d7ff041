"""import hccl.torch: the torch.distributed backend "hccl" (torch 1.13, CPU tensors).

    import hccl.torch, torch.distributed as dist
    dist.init_process_group("hccl")            # torchrun, init_method="tcp://...", or a store

Each process group is one hccl.Comm (its root info travels through the group's c10d store;
every rank uses its node's daemon, HCCLD_SOCKET). Operations run in issue order (see
_torch_lane): on the group's worker thread, which waits inside libhccl without the GIL, so an op
issued with async_op=True (DDP's gradient buckets) proceeds while the caller computes; in the
caller's thread instead when the group has nothing in flight and the op is at most
INLINE_MAX_BYTES or torch.distributed's own function will wait for it at once (async_op=False).
A small all_reduce that libhccl can take as it is goes straight from the tensor's address.
Works (see _torch_work): wait() raises the op's error, is_completed(), get_future().
p2p (see _torch_p2p): sends from rank a to rank b with one tag run in issue order on a comm of
their own (made on first use, with its own worker), so isend/irecv pairs match in any order
without deadlock, by (peer, tag) in order, and without waiting for the group's collectives; a
receive from any source takes the first message no receive has claimed; batch_isend_irecv is one
HcclBatchSendRecv on the group's comm (all in flight at once, paired in order, tags aside).
Timeouts: the group's timeout bounds the wait for every rank to join (the late ones are named)
and each op (the comm's hcclExecTimeOut). An op that times out or loses a peer leaves the group
unusable: every later op fails at once with that reason.
"""
import atexit
import datetime
import functools
import math
import sys
import weakref

import numpy as np
import torch
import torch.distributed as dist

from . import comm as _comm
from ._torch_lane import Lane, Op
from ._torch_p2p import Channels
from ._torch_work import Done, Work
from .comm import BATCH_SEND_RECV_MAX, RECV, SEND, Comm, RootInfo
from ._lib import lib
from .torch_tensors import Staged, bitwise, direct, finish_avg, reduce_op
from .types import HcclError, check

_STORE_KEY = "hccl/root_info"
# Groups still open: closed at exit, before the interpreter tears down what their workers use
# (a group left to the end otherwise aborted the process in torch's teardown).
_LIVE = weakref.WeakSet()


@atexit.register
def _close_all():
    for pg in list(_LIVE):
        pg.close()


# Collectives this small run in the caller's thread when the group has nothing in flight: the
# hand-off to the worker and back costs more than they do.
INLINE_MAX_BYTES = 64 << 10
_C10D = dist.distributed_c10d.all_reduce.__code__.co_filename


def _caller_waits():
    """True when torch.distributed's own function (dist.all_reduce, dist.broadcast, ...) issued
    the op with async_op=False: it waits for the work as soon as the op returns, so the op can
    as well run in its thread, whatever its size (a hand-off to the worker and back costs up to
    half of a 1 MiB all_reduce). A C++ backend cannot know this; DDP's buckets and async_op=True
    are queued as before."""
    f = sys._getframe(1)  # pylint: disable=protected-access
    while f is not None and f.f_code.co_filename == __file__:
        f = f.f_back
    return f is not None and f.f_code.co_filename == _C10D and f.f_locals.get("async_op") is False


def _nbytes(outputs):
    n = 0
    for t in outputs:
        n += _nbytes(t) if isinstance(t, (list, tuple)) else t.numel() * t.element_size()
    return n


def _has(store, key):
    try:
        store.wait([key], datetime.timedelta(milliseconds=10))
        return True
    except RuntimeError:
        return False


def _join(store, rank, size, timeout):
    """Every rank says it is here and waits for all the others, within the group's timeout: a
    rank that never comes is named, instead of the comm init waiting HCCL_CONNECT_TIMEOUT."""
    keys = [f"hccl/joined/{q}" for q in range(size)]
    store.set(keys[rank], b"1")
    try:
        store.wait(keys, timeout)
    except RuntimeError:
        missing = [q for q, k in enumerate(keys) if not _has(store, k)]
        raise RuntimeError(f"hccl init: rank(s) {missing} of {size} did not join within "
                           f"{timeout}") from None


class ProcessGroupHCCL(dist.ProcessGroup):
    """A torch ProcessGroup over one hccl.Comm."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._rank, self._size, self.timeout = rank, size, timeout
        if rank == 0:
            store.set(_STORE_KEY, _comm.get_root_info().raw)
        _join(store, rank, size, timeout)
        root = RootInfo(store.get(_STORE_KEY))
        # The group's timeout bounds each of its ops (hcclExecTimeOut): HCCL_E_TIMEOUT then.
        secs = max(1, math.ceil(timeout.total_seconds()))
        self._config = {"hcclExecTimeOut": min(secs, 2**31 - 1)}
        self.comm = Comm(size, root, rank, config=self._config)
        self._store = store
        self._lane = Lane("hccl-pg", self.comm)
        self._channels = Channels(self)
        self._coalescing = None
        self._buckets = {}  # DDP bucket index: ((address, bytes), its Registration or None)
        _LIVE.add(self)

    def _submit(self, what, run, outputs, inline=True, lane=None):
        """Runs the op here and now when it is small and nothing of the lane's (the group's by
        default) is in flight, else queues it for the lane's worker (either way in issue
        order); returns its work."""
        lane = lane or self._lane
        if inline and (_nbytes(outputs) <= INLINE_MAX_BYTES or _caller_waits()):
            ran, err = lane.run_inline(what, run)
            if ran:
                return Done(outputs, err)
        op = Op(run, outputs, what)
        lane.put(op)
        return Work(lane, op)

    # --- what torch asks of a process group ----------------------------------------------
    def getBackendName(self):  # noqa: N802 (torch's name)
        return "hccl"

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def allreduce(self, tensors, opts=None):
        if len(tensors) == 1:
            work = self._allreduce_direct(tensors[0], opts)
            if work is not None:
                return work
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        fold = bitwise(op, tensors[0].dtype, "allreduce")
        if fold is not None:
            return self._fold("allreduce", tensors, fold, lambda t, res: t.copy_(res.view_as(t)))
        staged = [Staged(t, "allreduce") for t in tensors]
        rop = reduce_op(op, tensors[0].dtype, "allreduce")

        def run():
            for s in staged:
                self.comm.all_reduce(s.array, s.array, rop, dtype=s.hccl_dtype)
                s.done()
            finish_avg(op, tensors, self._size)

        return self._submit("allreduce", run, tensors)

    def _fold(self, what, inputs, fold, take, outputs=None):
        """A bitwise reduce op (HCCL has none): every rank's copy of each input by an all_gather
        (the group's size times the bytes of a reduction), folded here element by element with
        fold (torch.bitwise_and, ...); take(input, result) keeps what this rank gets."""
        def run():
            for t in inputs:
                flat = t.detach().reshape(-1)
                rows = torch.empty((self._size, flat.numel()), dtype=flat.dtype)
                src, dst = self._gather_into(rows.view(-1), flat, what)
                if flat.numel():
                    self.comm.all_gather(src.array, dst.array, dtype=src.hccl_dtype)
                dst.done()
                take(t, functools.reduce(fold, rows.unbind(0)))

        return self._submit(what, run, outputs if outputs is not None else inputs)

    def _allreduce_direct(self, tensor, opts):
        """all_reduce of one tensor that libhccl reduces as it is, run here and now when the
        group has nothing in flight and the tensor is small (a loss, a norm, a flag) or the
        caller waits for it at once: straight from the tensor's address, no staging, no future
        until one is asked for. None when the general path must take it."""
        d = direct(tensor, opts)
        if d is None or (d[4] > INLINE_MAX_BYTES and not _caller_waits()):
            return None
        ptr, count, dtype, op, _ = d
        handle = self.comm.handle

        def run():
            check(lib.HcclAllReduce(ptr, ptr, count, dtype, op, handle, None), "HcclAllReduce")

        ran, err = self._lane.run_inline("allreduce", run)
        return Done([tensor], err) if ran else None

    def allreduce_coalesced(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if len({t.dtype for t in tensors}) > 1:
            raise RuntimeError("hccl allreduce_coalesced: the tensors must share one dtype")
        fold = bitwise(op, tensors[0].dtype, "allreduce_coalesced")
        if fold is not None:
            return self._fold("allreduce_coalesced", tensors, fold,
                              lambda t, res: t.copy_(res.view_as(t)))
        rop = reduce_op(op, tensors[0].dtype, "allreduce_coalesced")
        flat = torch.cat([t.detach().reshape(-1) for t in tensors])
        staged = Staged(flat, "allreduce_coalesced")

        def run():
            self.comm.all_reduce(staged.array, staged.array, rop, dtype=staged.hccl_dtype)
            at = 0
            for t in tensors:
                t.copy_(flat[at:at + t.numel()].view_as(t))
                at += t.numel()
            finish_avg(op, tensors, self._size)

        return self._submit("allreduce_coalesced", run, tensors)

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        staged = [Staged(t, "broadcast") for t in tensors]

        def run():
            for s in staged:
                self.comm.broadcast(s.array, root, dtype=s.hccl_dtype)
                s.done()

        return self._submit("broadcast", run, tensors)

    def reduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        root = opts.rootRank if opts is not None else 0
        fold = bitwise(op, tensors[0].dtype, "reduce")
        if fold is not None:
            return self._fold("reduce", tensors, fold, lambda t, res: (
                t.copy_(res.view_as(t)) if self._rank == root else None))
        staged = [Staged(t, "reduce") for t in tensors]
        rop = reduce_op(op, tensors[0].dtype, "reduce")

        def run():
            for s in staged:
                out = np.empty_like(s.array)
                self.comm.reduce(s.array, out, rop, root, dtype=s.hccl_dtype)
                if self._rank == root:
                    s.array[...] = out
                    s.done()
            if self._rank == root:
                finish_avg(op, tensors, self._size)

        return self._submit("reduce", run, tensors)

    def _gather_into(self, out_flat, inp, what):
        staged = Staged(inp, what)
        dst = Staged(out_flat, what)
        if dst.array.size != staged.array.size * self._size:
            raise RuntimeError(f"hccl {what}: the output holds {out_flat.numel()} elements, "
                               f"{inp.numel() * self._size} needed")
        return staged, dst

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 (torch's names)
        src, dst = self._gather_into(output, input, "all_gather_into_tensor")

        def run():
            self.comm.all_gather(src.array, dst.array, dtype=src.hccl_dtype)
            dst.done()

        return self._submit("all_gather_into_tensor", run, [output])

    def allgather(self, output_tensors, input_tensors, opts=None):
        outs, inp = output_tensors[0], input_tensors[0]
        if len(outs) != self._size:
            raise RuntimeError(
                f"hccl all_gather: {len(outs)} output tensors for {self._size} ranks")
        if any(o.numel() != inp.numel() for o in outs):
            return self._allgather_uneven(outs, inp, output_tensors)
        flat = torch.empty((self._size * inp.numel(),), dtype=inp.dtype)
        src, dst = self._gather_into(flat, inp, "all_gather")

        def run():
            self.comm.all_gather(src.array, dst.array, dtype=src.hccl_dtype)
            for q, t in enumerate(outs):
                t.copy_(flat[q * inp.numel():(q + 1) * inp.numel()].view_as(t))

        return self._submit("all_gather", run, output_tensors)

    def _allgather_uneven(self, outs, inp, output_tensors):
        """all_gather into outputs of different sizes: HcclAllGatherV (rank q's input has
        outs[q]'s size on every rank)."""
        counts = [o.numel() for o in outs]
        if counts[self._rank] != inp.numel():
            raise RuntimeError(f"hccl all_gather: this rank's input has {inp.numel()} elements, "
                               f"its output {counts[self._rank]}")
        displs = [sum(counts[:q]) for q in range(self._size)]
        flat = torch.empty((sum(counts),), dtype=inp.dtype)
        src, dst = Staged(inp, "all_gather"), Staged(flat, "all_gather")

        def run():
            self.comm.all_gather_v(src.array, dst.array, counts, displs, dtype=src.hccl_dtype)
            for t, at, k in zip(outs, displs, counts):
                t.copy_(flat[at:at + k].view_as(t))

        return self._submit("all_gather", run, output_tensors)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        """output_lists[q][i] gets rank q's input_list[i]: one all_gather of the inputs laid
        end to end (torch's all_gather_coalesced; the shapes must match across ranks, as torch
        says, which nothing checks)."""
        if len(output_lists) != self._size or any(len(o) != len(input_list)
                                                  for o in output_lists):
            raise RuntimeError(
                f"hccl all_gather_coalesced: {len(output_lists)} output lists for {self._size} "
                f"ranks, each must hold one tensor per input ({len(input_list)})")
        sizes = [t.numel() for t in input_list]
        for outs in output_lists:
            for t, k in zip(outs, sizes):
                if t.numel() != k:
                    raise RuntimeError(f"hccl all_gather_coalesced: an output of {t.numel()} "
                                       f"elements for an input of {k}")
        total = sum(sizes)
        inp = torch.cat([t.detach().reshape(-1) for t in input_list])
        flat = torch.empty((self._size * total,), dtype=inp.dtype)
        src, dst = self._gather_into(flat, inp, "all_gather_coalesced")

        def run():
            if total:
                self.comm.all_gather(src.array, dst.array, dtype=src.hccl_dtype)
            for q, outs in enumerate(output_lists):
                at = q * total
                for t, k in zip(outs, sizes):
                    t.copy_(flat[at:at + k].view_as(t))
                    at += k

        return self._submit("all_gather_coalesced", run, output_lists)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        fold = bitwise(op, input.dtype, "reduce_scatter_tensor")
        dst, src = self._gather_into(input, output, "reduce_scatter_tensor")
        if fold is not None:
            k = output.numel()
            return self._fold("reduce_scatter_tensor", [input], fold, lambda _, res: output.copy_(
                res[self._rank * k:(self._rank + 1) * k].view_as(output)), [output])
        rop = reduce_op(op, input.dtype, "reduce_scatter_tensor")

        def run():
            self.comm.reduce_scatter(src.array, dst.array, rop, dtype=dst.hccl_dtype)
            dst.done()
            finish_avg(op, [output], self._size)

        return self._submit("reduce_scatter_tensor", run, [output])

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        out, ins = output_tensors[0], input_tensors[0]
        if len(ins) != self._size:
            raise RuntimeError(f"hccl reduce_scatter: {len(ins)} input tensors for {self._size} "
                               "ranks")
        flat = torch.cat([t.detach().reshape(-1) for t in ins])
        if any(t.numel() != ins[0].numel() for t in ins):
            return self._reduce_scatter_uneven(out, flat, [t.numel() for t in ins], opts)
        return self._reduce_scatter_base(out, flat, opts)

    def _reduce_scatter_uneven(self, out, flat, counts, opts):
        """reduce_scatter of inputs of different sizes: HcclReduceScatterV."""
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if counts[self._rank] != out.numel():
            raise RuntimeError(f"hccl reduce_scatter: this rank's output has {out.numel()} "
                               f"elements, its input {counts[self._rank]}")
        fold = bitwise(op, out.dtype, "reduce_scatter")
        displs = [sum(counts[:q]) for q in range(self._size)]
        if fold is not None:
            me = displs[self._rank]
            return self._fold("reduce_scatter", [flat], fold, lambda _, res: out.copy_(
                res[me:me + out.numel()].view_as(out)), [out])
        rop = reduce_op(op, out.dtype, "reduce_scatter")
        src, dst = Staged(flat, "reduce_scatter"), Staged(out, "reduce_scatter")

        def run():
            self.comm.reduce_scatter_v(src.array, counts, displs, dst.array, rop,
                                       dtype=src.hccl_dtype)
            dst.done()
            finish_avg(op, [out], self._size)

        return self._submit("reduce_scatter", run, [out])

    def alltoall_base(self, output, input,  # noqa: A002 (torch's names)
                      output_split_sizes, input_split_sizes, opts=None):
        n = self._size
        src, dst = Staged(input, "all_to_all_single"), Staged(output, "all_to_all_single")
        row_in = input.numel() // max(input.shape[0], 1) if input.dim() else 1
        row_out = output.numel() // max(output.shape[0], 1) if output.dim() else 1
        if not input_split_sizes and not output_split_sizes:
            if input.numel() % n != 0 or output.numel() != input.numel():
                raise RuntimeError(f"hccl all_to_all_single: {input.numel()} elements do not split "
                                   f"evenly over {n} ranks into {output.numel()}")
            sc = rc = [input.numel() // n] * n
        else:
            sc = [s * row_in for s in (input_split_sizes or [input.shape[0] // n] * n)]
            rc = [s * row_out for s in (output_split_sizes or [output.shape[0] // n] * n)]
        if len(sc) != n or len(rc) != n or sum(sc) != input.numel() or sum(rc) != output.numel():
            raise RuntimeError("hccl all_to_all_single: the split sizes do not fit the tensors")
        sd, rd = np.cumsum([0] + sc[:-1]), np.cumsum([0] + rc[:-1])

        def run():
            self.comm.all_to_all_v(src.array, sc, sd, dst.array, rc, rd, dtype=src.hccl_dtype)
            dst.done()

        return self._submit("all_to_all_single", run, [output])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        inp = torch.cat([t.detach().reshape(-1) for t in input_tensors])
        out = torch.empty((sum(t.numel() for t in output_tensors),), dtype=inp.dtype)
        work_src, work_dst = Staged(inp, "all_to_all"), Staged(out, "all_to_all")
        sc, rc = [t.numel() for t in input_tensors], [t.numel() for t in output_tensors]
        sd, rd = np.cumsum([0] + sc[:-1]), np.cumsum([0] + rc[:-1])

        def run():
            self.comm.all_to_all_v(work_src.array, sc, sd, work_dst.array, rc, rd,
                                   dtype=work_src.hccl_dtype)
            for t, at, c in zip(output_tensors, rd, rc):
                t.copy_(out[at:at + c].view_as(t))

        return self._submit("all_to_all", run, output_tensors)

    def scatter(self, output_tensors, input_tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        out = Staged(output_tensors[0], "scatter")
        src = None
        if self._rank == root:
            src = Staged(torch.cat([t.detach().reshape(-1) for t in input_tensors[0]]), "scatter")

        def run():
            self.comm.scatter(src.array if src else None, out.array, root, dtype=out.hccl_dtype)
            out.done()

        return self._submit("scatter", run, output_tensors)

    def gather(self, output_tensors, input_tensors, opts=None):
        """HCCL has no gather: the root receives every rank's tensor in batches of receives (of
        up to BATCH_SEND_RECV_MAX, one after the other: each completes on its own, as every
        other rank sends once)."""
        root = opts.rootRank if opts is not None else 0
        inp = Staged(input_tensors[0], "gather")

        def run():
            if self._rank != root:
                self.comm.batch_send_recv([(SEND, inp.array, root)])
                return
            outs = [Staged(t, "gather") for t in output_tensors[0]]
            items = [(RECV, o.array, q) for q, o in enumerate(outs) if q != root]
            for at in range(0, len(items), BATCH_SEND_RECV_MAX):
                self.comm.batch_send_recv(items[at:at + BATCH_SEND_RECV_MAX])
            outs[root].array[...] = inp.array
            for o in outs:
                o.done()

        return self._submit("gather", run, output_tensors)

    def barrier(self, opts=None):
        return self._submit("barrier", self.comm.barrier, [])

    # --- point to point (_torch_p2p) ----------------------------------------------------
    def _p2p(self, kind, tensors, peer, tag, what):
        if self._coalescing is not None:  # batch_isend_irecv: one batch, paired in order
            staged = [Staged(t, what) for t in tensors]
            self._coalescing.append(([(kind, s.array, peer) for s in staged], staged, tensors))
            return None
        if kind == SEND:
            return self._channels.send(tensors, peer, tag)
        return self._channels.recv(tensors, peer, tag)

    def send(self, tensors, dst, tag=0):
        return self._p2p(SEND, tensors, dst, tag, "send")

    def recv(self, tensors, src, tag=0):
        return self._p2p(RECV, tensors, src, tag, "recv")

    def recv_anysource(self, tensors, tag=0):
        return self._channels.recv_any(tensors, tag)

    def _start_coalescing(self):
        self._coalescing = []

    def _end_coalescing(self, reqs):
        """batch_isend_irecv: every send and receive since _start_coalescing in one
        HcclBatchSendRecv; each of their requests is that batch's work."""
        batch, self._coalescing = self._coalescing, None
        if not batch:
            return
        items = [i for b in batch for i in b[0]]
        if len(items) > BATCH_SEND_RECV_MAX:
            raise RuntimeError(f"hccl batch_isend_irecv: {len(items)} sends and receives, at most "
                               f"{BATCH_SEND_RECV_MAX}: HCCL runs a batch all in flight at once, "
                               "and a batch split in order could wait for ever")
        staged = [s for b in batch for s in b[1]]
        tensors = [t for b in batch for t in b[2]]

        def run():
            self.comm.batch_send_recv(items)
            for s in staged:
                s.done()

        work = self._submit("batch_isend_irecv", run, tensors, inline=False)
        reqs.extend([work] * len(batch))

    def register_bucket(self, index, tensor):
        """Keeps tensor, DDP bucket index's flat buffer, registered with the group's comm
        (Comm.register: its allreduces skip the staging copy), replacing the registration of
        the bucket's earlier buffer (DDP rebuilds its buckets once, after the first step).
        Returns whether it is registered: a buffer the arena has no room for
        (HCCL_BUFFSIZE) is staged as before."""
        key = (tensor.data_ptr(), tensor.numel() * tensor.element_size())
        have = self._buckets.get(index)
        if have is not None and have[0] == key:
            return have[1] is not None
        if have is not None and have[1] is not None:
            have[1].close()
        try:
            reg = self.comm.register(tensor.detach().reshape(-1).view(torch.uint8).numpy())
        except HcclError as e:
            if not any(r is None for _, r in self._buckets.values()):
                print(f"hccl: DDP bucket {index} ({key[1]} bytes) is not registered "
                      f"({e.name}); it is staged", file=sys.stderr)
            reg = None
        self._buckets[index] = (key, reg)
        return reg is not None

    def abort(self):
        """Ends the group at once (HcclCommAbort on its comm and its p2p comms): the ops under
        way and queued fail with RuntimeError, as does every later one; the other ranks' ops
        on these comms fail (their groups become unusable). For a rank that must stop waiting
        on peers that will never come; destroy_process_group afterwards does not wait."""
        why = f"rank {self._rank} aborted the group"
        self._lane.broken = why  # first: what waits on the group sees it
        self._channels.abort(why)
        self._lane.abort(why)

    def close(self):
        """Ends the workers after the ops queued so far, then their comms."""
        self._channels.close()
        self._lane.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pylint: disable=broad-except
            pass


def abort(group=None):
    """Aborts group (None: the default one), a process group of backend "hccl":
    ProcessGroupHCCL.abort."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()  # noqa
    if not isinstance(pg, ProcessGroupHCCL):
        raise RuntimeError(f"hccl abort: {pg} is not a process group of backend hccl")
    pg.abort()


def _create(store, rank, size, timeout):
    return ProcessGroupHCCL(store, rank, size, timeout)


if "HCCL" not in dist.Backend._plugins:  # pylint: disable=protected-access
    dist.Backend.register_backend("hccl", _create)
