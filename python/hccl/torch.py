"""import hccl.torch: the torch.distributed backend "hccl" (torch 1.13, CPU tensors).

    import hccl.torch, torch.distributed as dist
    dist.init_process_group("hccl")            # torchrun, init_method="tcp://...", or a store

Each process group is one hccl.Comm (its root info travels through the group's c10d store;
every rank uses its node's daemon, HCCLD_SOCKET). Operations run in issue order on the group's
worker thread, which waits inside libhccl without the GIL, so an op issued with async_op=True
(DDP's gradient buckets) proceeds while the caller computes; a collective of at most
INLINE_MAX_BYTES runs in the caller's thread instead when the group has nothing in flight.
Works wrap the op's future: wait() raises the op's error, is_completed(), get_future().
p2p: sends from rank a to rank b run in issue order on a comm of their own (made on first
use, with its own worker), so isend/irecv pairs match in any order without deadlock, and
without waiting for the group's collectives; batch_isend_irecv is one HcclBatchSendRecv on the
group's comm (all in flight at once).
Timeouts: the group's timeout bounds the wait for every rank to join (the late ones are named)
and each op (the comm's hcclExecTimeOut). An op that times out or loses a peer leaves the group
unusable: every later op fails at once with that reason.
"""
import atexit
import datetime
import math
import queue
import threading
import time
import weakref

import numpy as np
import torch
import torch.distributed as dist

from . import comm as _comm
from .comm import RECV, SEND, Comm, RootInfo
from .types import HcclError, Result
from .torch_tensors import Staged, finish_avg, reduce_op

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


class _Lane:
    """Ops in issue order on one comm: the worker's queue, what is in flight, and the lock that
    lets one op run at a time (the worker's, or one run inline). comm is the lane's comm."""

    def __init__(self, name, comm=None):
        self.comm = comm
        self.ops = queue.Queue()
        self.run_lock = threading.Lock()
        self.count_lock = threading.Lock()
        self.pending = 0
        # Set when an op timed out or lost a peer: the comm's ranks may disagree on what ran,
        # so every later op fails at once with this reason (as NCCL's aborted comm does).
        self.broken = None
        self.worker = threading.Thread(target=_serve, args=(self,), name=name, daemon=True)
        self.worker.start()

    def done(self):
        with self.count_lock:
            self.pending -= 1

    def close(self):
        """Ends the worker after the ops queued so far, then the comm."""
        if self.worker is not None:
            self.ops.put(None)
            self.worker.join()
            self.worker = None
            if self.comm is not None:
                self.comm.destroy()


def _complete(lane, op):
    if lane.broken is not None:
        op.fut.set_exception(RuntimeError(f"hccl {op.what}: the group is unusable: {lane.broken}"))
        return
    try:
        op.run()
        op.fut.set_result(op.outputs)
    except Exception as e:  # pylint: disable=broad-except
        why = f"hccl {op.what}: {e}"
        if isinstance(e, HcclError) and e.result in (Result.E_TIMEOUT, Result.E_REMOTE):
            lane.broken = why
        op.fut.set_exception(RuntimeError(why))


def _serve(lane):
    """The worker: runs the lane's ops in order until None (it holds the lane, not the group,
    so a group nobody uses any more can go)."""
    while True:
        op = lane.ops.get()
        if op is None:
            return
        with lane.run_lock:
            _complete(lane, op)
        lane.done()
        op = None


def _nbytes(outputs):
    n = 0
    for t in outputs:
        n += _nbytes(t) if isinstance(t, (list, tuple)) else t.numel() * t.element_size()
    return n


# Works that torch may still call: a Python Work whose object is collected while C++ holds it
# loses its overrides (wait() then waits forever), so each stays here until its op is done and
# someone took its outcome (wait() or get_future()). A work neither waited nor asked for its
# future stays held.
_HELD = set()
_HELD_LOCK = threading.Lock()


class _Work(dist._Work):  # pylint: disable=protected-access
    """An op's work over its future. wait() raises the op's error (torch 1.13's works made from
    futures return True whatever happened)."""

    def __init__(self, fut):
        super().__init__()
        self._fut, self._taken = fut, False
        with _HELD_LOCK:
            _HELD.add(self)
        fut.add_done_callback(lambda _f: self._release())

    def _release(self):
        if self._taken and self._fut.done():
            with _HELD_LOCK:
                _HELD.discard(self)

    def wait(self, timeout=None):
        self._taken = True
        try:
            self._fut.wait()
        finally:
            self._release()
        return True

    def get_future(self):
        self._taken = True
        self._release()
        return self._fut

    def is_completed(self):
        return self._fut.done()

    def is_success(self):
        if not self._fut.done():
            raise RuntimeError("hccl: is_success() of a work still in flight")
        try:
            self._fut.value()
            return True
        except RuntimeError:
            return False

    def result(self):
        return self._fut.value()


class _Op:
    __slots__ = ("run", "fut", "outputs", "what")

    def __init__(self, run, outputs, what):
        self.run, self.outputs, self.what = run, outputs, what
        self.fut = torch.futures.Future()


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
        self._lane = _Lane("hccl-pg", self.comm)
        self._channels = {}  # (src, dst): the _Lane of p2p from rank src to rank dst
        self._coalescing = None
        _LIVE.add(self)

    def _submit(self, what, run, outputs, inline=True, lane=None):
        """Queues the op for the lane's worker (the group's by default), or runs it here and now
        when it is small and nothing of the lane's is in flight (either way in issue order);
        returns its work."""
        op = _Op(run, outputs, what)
        self._queue(lane or self._lane, op, inline)
        return _Work(op.fut)

    @staticmethod
    def _queue(lane, op, inline):
        with lane.count_lock:
            idle = lane.pending == 0
            lane.pending += 1
        if idle and inline and _nbytes(op.outputs) <= INLINE_MAX_BYTES:
            with lane.run_lock:
                _complete(lane, op)
            lane.done()
        else:
            lane.ops.put(op)

    # --- what torch asks of a process group ----------------------------------------------
    def getBackendName(self):  # noqa: N802 (torch's name)
        return "hccl"

    def rank(self):
        return self._rank

    def size(self):
        return self._size

    def allreduce(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        staged = [Staged(t, "allreduce") for t in tensors]
        rop = reduce_op(op, tensors[0].dtype, "allreduce")

        def run():
            for s in staged:
                self.comm.all_reduce(s.array, s.array, rop, dtype=s.hccl_dtype)
                s.done()
            finish_avg(op, tensors, self._size)

        return self._submit("allreduce", run, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if len({t.dtype for t in tensors}) > 1:
            raise RuntimeError("hccl allreduce_coalesced: the tensors must share one dtype")
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
        flat = torch.empty((self._size * inp.numel(),), dtype=inp.dtype)
        src, dst = self._gather_into(flat, inp, "all_gather")

        def run():
            self.comm.all_gather(src.array, dst.array, dtype=src.hccl_dtype)
            for q, t in enumerate(outs):
                t.copy_(flat[q * inp.numel():(q + 1) * inp.numel()].view_as(t))

        return self._submit("all_gather", run, output_tensors)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        rop = reduce_op(op, input.dtype, "reduce_scatter_tensor")
        dst, src = self._gather_into(input, output, "reduce_scatter_tensor")

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
        return self._reduce_scatter_base(out, flat, opts)

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
        """HCCL has no gather: the root receives every rank's tensor in one batch of receives."""
        root = opts.rootRank if opts is not None else 0
        inp = Staged(input_tensors[0], "gather")

        def run():
            if self._rank != root:
                self.comm.batch_send_recv([(SEND, inp.array, root)])
                return
            outs = [Staged(t, "gather") for t in output_tensors[0]]
            items = [(RECV, o.array, q) for q, o in enumerate(outs) if q != root]
            if items:
                self.comm.batch_send_recv(items)
            outs[root].array[...] = inp.array
            for o in outs:
                o.done()

        return self._submit("gather", run, output_tensors)

    def barrier(self, opts=None):
        return self._submit("barrier", self.comm.barrier, [])

    # --- point to point -----------------------------------------------------------------
    def _p2p(self, kind, tensors, peer, what):
        staged = [Staged(t, what) for t in tensors]
        items = [(kind, s.array, peer) for s in staged]
        if self._coalescing is not None:
            self._coalescing.append((items, staged, tensors))
            return None

        ch = self._channel(self._rank, peer) if kind == SEND else self._channel(peer, self._rank)
        # In the channel's comm the sender is rank 0 and the receiver rank 1.
        items = [(kind, s.array, 1 if kind == SEND else 0) for s in staged]

        def run():
            ch.comm.batch_send_recv(items)
            for s in staged:
                s.done()

        # Never inline: an isend must not hold its caller until the peer receives.
        return self._submit(what, run, tensors, inline=False, lane=ch)

    def _channel(self, src, dst):
        """The lane of p2p from rank src to rank dst: a comm of its own (src is its rank 0)
        with a worker, made on first use. So a send never waits behind a receive, nor behind
        the group's collectives: isends and irecvs match in any order, as gloo's do. The
        sender puts a root info in the store and each side's worker polls a counter for the
        other (a blocking store wait would hold the store from everyone else), within the
        group's timeout and while the group's comm has all its ranks."""
        ch = self._channels.get((src, dst))
        if ch is not None:
            return ch
        ch = self._channels[(src, dst)] = _Lane(f"hccl-p2p-{src}-{dst}")
        key, sender = f"hccl/p2p/{src}-{dst}", self._rank == src
        store, timeout = self._store, self.timeout

        def await_count(name, who):
            """Polls the store counter key/name until it is set, within the group's timeout
            and while the group's comm has not lost a rank."""
            deadline, nap = time.monotonic() + timeout.total_seconds(), 0.0005
            while store.add(f"{key}/{name}", 0) == 0:
                err = self.comm.async_error()
                if err != 0:
                    raise RuntimeError(f"rank {who} is gone (the group's comm failed: "
                                       f"HcclResult {err})")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"rank {who} did not come within {timeout}")
                time.sleep(nap)
                nap = min(nap * 2, 0.05)

        def setup():
            try:
                if sender:
                    store.set(key, _comm.get_root_info().raw)
                    store.add(f"{key}/ready", 1)
                    await_count("joined", dst)
                else:
                    await_count("ready", src)
                    store.add(f"{key}/joined", 1)
                ch.comm = Comm(2, RootInfo(store.get(key)), 0 if sender else 1,
                               config=self._config)
            except Exception as e:  # pylint: disable=broad-except
                ch.broken = f"p2p from rank {src} to rank {dst}: {e}"
                raise

        # No work for it: nobody waits on the setup; the channel's first op reports its failure.
        self._queue(ch, _Op(setup, [], "p2p setup"), inline=False)
        return ch

    def send(self, tensors, dst, tag=0):
        return self._p2p(SEND, tensors, dst, "send")

    def recv(self, tensors, src, tag=0):
        return self._p2p(RECV, tensors, src, "recv")

    def recv_anysource(self, tensors, tag=0):
        raise RuntimeError("hccl recv from any source: not supported (HCCL pairs sends and "
                           "receives by peer)")

    def _start_coalescing(self):
        self._coalescing = []

    def _end_coalescing(self, reqs):
        """batch_isend_irecv: every send and receive since _start_coalescing in one
        HcclBatchSendRecv; each of their requests is that batch's work."""
        batch, self._coalescing = self._coalescing, None
        if not batch:
            return
        items = [i for b in batch for i in b[0]]
        staged = [s for b in batch for s in b[1]]
        tensors = [t for b in batch for t in b[2]]

        def run():
            self.comm.batch_send_recv(items)
            for s in staged:
                s.done()

        work = self._submit("batch_isend_irecv", run, tensors, inline=False)
        reqs.extend([work] * len(batch))

    def close(self):
        """Ends the workers after the ops queued so far, then their comms."""
        for ch in self._channels.values():
            ch.close()
        self._lane.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # pylint: disable=broad-except
            pass


def _create(store, rank, size, timeout):
    return ProcessGroupHCCL(store, rank, size, timeout)


if "HCCL" not in dist.Backend._plugins:  # pylint: disable=protected-access
    dist.Backend.register_backend("hccl", _create)
