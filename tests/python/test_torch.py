"""torch.distributed with backend "hccl" (import hccl.torch) against gloo on the same inputs, in
the same processes: every op torch users call, many dtypes, sync and async, groups, p2p in
batches, DDP bit for bit, and the errors (RuntimeError naming the op, never a hang)."""
import datetime
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import unittest
import warnings

import numpy as np

import ranks  # the path to python/ first
from ranks import (TOP, Daemon, _ctx,  # noqa: F401 (unittest finds the last two)
                   setUpModule, tearDownModule)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hccl.daemon  # noqa: E402
import hccl.torch  # noqa: E402,F401

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool]
RED = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
BITWISE = [dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR]
ALL_RED = RED + BITWISE
_COMBINE = {dist.ReduceOp.SUM: torch.add, dist.ReduceOp.PRODUCT: torch.mul,
            dist.ReduceOp.MIN: torch.minimum, dist.ReduceOp.MAX: torch.maximum,
            dist.ReduceOp.BAND: torch.bitwise_and, dist.ReduceOp.BOR: torch.bitwise_or,
            dist.ReduceOp.BXOR: torch.bitwise_xor}


def ops_of(dt):
    """The reduce ops of dtype dt: the bitwise ones on integer and bool tensors only."""
    return RED if dt.is_floating_point else ALL_RED


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _main(fn, r, n, port, q, sock, pg_timeout):
    try:
        if sock is not None:
            os.environ["HCCLD_SOCKET"] = sock
        torch.manual_seed(1234 + r)
        dist.init_process_group("hccl", init_method=f"tcp://127.0.0.1:{port}", rank=r,
                                world_size=n, timeout=pg_timeout)
        gloo = dist.new_group(backend="gloo")
        res = fn(r, n, gloo)
        # By value: a tensor put in a queue as is would be shared memory that dies with us.
        buf = io.BytesIO()
        torch.save(res, buf)
        q.put((r, True, buf.getvalue()))
        dist.destroy_process_group()
    except BaseException:  # pylint: disable=broad-except
        q.put((r, False, traceback.format_exc()))


def run_torch(n, fn, timeout=60, socks=None, pg_timeout=dist.default_pg_timeout, answer=None):
    """fn(rank, n, gloo_group) in n forked ranks whose default group is "hccl" (rank r on the
    daemon at socks[r] if given) with pg_timeout; their results by rank (failures and hangs fail
    the call). answer: the ranks that must answer (all; a killed one cannot)."""
    port = free_port()
    q = _ctx.Queue()
    procs = [_ctx.Process(target=_main,
                          args=(fn, r, n, port, q, socks[r] if socks else None, pg_timeout))
             for r in range(n)]
    for p in procs:
        p.start()
    res, deadline = {}, time.monotonic() + timeout
    want = set(range(n) if answer is None else answer)
    try:
        while not want <= set(res):
            if time.monotonic() > deadline:
                raise AssertionError(f"ranks {sorted(want - set(res))} hung")
            try:
                r, ok, v = q.get(timeout=1.0)
            except Exception:  # queue.Empty
                continue
            if not ok:
                raise AssertionError(f"rank {r} failed:\n{v}")
            res[r] = torch.load(io.BytesIO(v))
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
    return [res.get(r) for r in range(n)]


def sample(r, dtype, count=64, seed=0):
    g = torch.Generator().manual_seed(seed * 101 + r * 7 + DTYPES.index(dtype))
    v = torch.randint(1, 4, (count,), generator=g)
    return (v > 1) if dtype == torch.bool else v.to(dtype)


def both(fn_hccl, fn_gloo):
    """(hccl's result, gloo's result or None when gloo lacks the op for this dtype)."""
    a = fn_hccl()
    try:
        b = fn_gloo()
    except RuntimeError:
        b = None
    return a, b


def reductions(r, n, gloo):
    out = {}
    for dt in DTYPES:
        for op in ops_of(dt):
            def run(group, dt=dt, op=op):
                t = sample(r, dt)
                dist.all_reduce(t, op=op, group=group)
                return t
            out[(str(dt), ALL_RED.index(op))] = both(lambda: run(None), lambda: run(gloo))
    return out


def local_reduce(op, dt, inputs):
    """op over the inputs (lists of tensors of dtype dt, one list per rank), worked out here:
    in float64, which is exact for small integers (bool's SUM is OR, PRODUCT AND), or for the
    bitwise ops in dt itself."""
    wide = (lambda t: t) if op in BITWISE else (lambda t: t.to(torch.float64))
    acc = [wide(t) for t in inputs[0]]
    for ts in inputs[1:]:
        acc = [_COMBINE[op](a, wide(b)) for a, b in zip(acc, ts)]
    return [(t > 0) if dt == torch.bool and op not in BITWISE else t.to(dt) for t in acc]


def local_reference(n, dt, op):
    return local_reduce(op, dt, [[sample(q, dt)] for q in range(n)])[0]


def placements(r, n, gloo):
    """all_reduce wherever an op can run (hccl.torch's lanes), with gloo's result on the same
    inputs: inline (small; large from dist's own synchronous call), queued (async_op=True),
    queued behind an op in flight, run by the thread that waits on the group's own work (or by
    the worker, whichever comes first), and through get_future()."""
    big = 1 << 20  # float32 elements: 4 MiB, above hccl.torch.INLINE_MAX_BYTES

    def run(group):
        pg = group or dist.distributed_c10d._get_default_group()  # pylint: disable=W0212
        f32, res = torch.float32, []
        for seed, op, count in ((1, dist.ReduceOp.SUM, big), (2, dist.ReduceOp.MAX, big),
                                (3, dist.ReduceOp.SUM, 16)):
            t = sample(r, f32, count, seed)
            dist.all_reduce(t, op=op, group=group)
            res.append(t)
        a, b, c = sample(r, f32, big, 4), sample(r, f32, big, 5), sample(r, torch.int64, 16, 6)
        work = dist.all_reduce(a, group=group, async_op=True)
        dist.all_reduce(b, group=group)  # queued behind a
        dist.all_reduce(c, op=dist.ReduceOp.PRODUCT, group=group)
        work.wait()
        d, e = sample(r, f32, big, 7), sample(r, f32, 16, 8)
        pg.allreduce([d]).wait()
        pg.allreduce([e]).get_future().wait()
        return res + [a, b, c, d, e]

    return both(lambda: run(None), lambda: run(gloo))


# World sizes and daemons: n ranks on the test's daemon (socks None), or split over it and a
# second one ("two": the first half on the test's daemon).
PLACEMENTS = [(2, None), (3, None), (4, None), (3, "two"), (4, "two")]


def on_placement(n, fn, socks):
    if socks is None:
        return run_torch(n, fn)
    other = Daemon()
    try:
        half = (n + 1) // 2
        return run_torch(n, fn, socks=[ranks.DAEMON.sock] * half + [other.sock] * (n - half))
    finally:
        other.stop()


# The dtypes gloo cannot move travel to it as their bytes.
_NOT_GLOO = (torch.bfloat16, torch.int16, torch.bool)


def moving_ops(r, n, gloo):
    """broadcast, all_gather, all_gather_into_tensor, all_gather_coalesced (an empty tensor
    among its inputs), all_to_all_single, scatter and gather of every dtype, all issued
    async_op=True before any is waited on; with gloo (on the same bits)."""
    def run(group, dt):
        as_bytes = group is not None and dt in _NOT_GLOO

        def w(t):
            return t.view(torch.uint8) if as_bytes else t

        def mk(count, seed):
            return w(sample(r, dt, count, seed))

        def z(count):
            return w(torch.zeros(count, dtype=dt))

        bc, ag, agt, a2a, sc = mk(6, 1), [z(5) for _ in range(n)], z(4 * n), z(2 * n), z(3)
        ga = [z(4) for _ in range(n)] if r == 0 else None
        agc = [[z(3), z(0), z(5)] for _ in range(n)]

        def coalesced():
            with warnings.catch_warnings():  # torch says at every call that it will go
                warnings.simplefilter("ignore", UserWarning)
                return dist.all_gather_coalesced(agc, [mk(3, 6), mk(0, 7), mk(5, 8)],
                                                 group=group, async_op=True)

        works = [dist.broadcast(bc, src=n - 1, group=group, async_op=True),
                 dist.all_gather(ag, mk(5, 2), group=group, async_op=True),
                 # gloo has no all_gather_into_tensor: its reference is all_gather's pieces
                 dist.all_gather_into_tensor(agt, mk(4, 3), group=group, async_op=True)
                 if group is None else
                 dist.all_gather(list(agt.chunk(n)), mk(4, 3), group=group, async_op=True),
                 coalesced(),
                 dist.all_to_all_single(a2a, mk(2 * n, 4), group=group, async_op=True),
                 dist.scatter(sc, [mk(3, 10 + q) for q in range(n)] if r == n - 1 else None,
                              src=n - 1, group=group, async_op=True),
                 dist.gather(mk(4, 5), ga, dst=0, group=group, async_op=True)]
        for work in works:
            work.wait()
        out = {"broadcast": bc, "all_gather": torch.cat(ag), "all_gather_into_tensor": agt,
               "all_gather_coalesced": torch.cat([t for ts in agc for t in ts]),
               "all_to_all_single": a2a, "scatter": sc}
        if r == 0:
            out["gather"] = torch.cat(ga)
        return {k: v.view(dt) if as_bytes else v for k, v in out.items()}

    res = {}
    for dt in DTYPES:
        h, g = run(None, dt), run(gloo, dt)
        res.update({(str(dt), k): (h[k], g[k]) for k in h})
    return res



def reducing_ops(r, n, gloo):
    """reduce_scatter_tensor, reduce and all_reduce_coalesced of every dtype and reduce op, all
    issued async_op=True before any wait. The reference: gloo's all_reduce of the same inputs
    (sliced for reduce_scatter), or where gloo lacks the dtype the reduction worked out here in
    float64 (the inputs are small integers, so it is exact; bool's SUM is OR, PRODUCT AND)."""
    def ins(q, dt):
        return (sample(q, dt, 8 * n, 1), sample(q, dt, 8, 2), sample(q, dt, 5, 3),
                sample(q, dt, 3, 4))

    def hccl_run(dt, op):
        full, red, c0, c1 = ins(r, dt)
        out = torch.zeros(8, dtype=dt)
        works = [dist.reduce_scatter_tensor(out, full, op=op, async_op=True),
                 dist.reduce(red, dst=0, op=op, async_op=True),
                 dist.all_reduce_coalesced([c0, c1], op=op, async_op=True)]
        for work in works:
            work.wait()
        return [out, red if r == 0 else torch.zeros(0, dtype=dt), c0, c1]

    def reference(dt, op):
        try:
            ts = list(ins(r, dt))
            for t in ts:
                dist.all_reduce(t, op=op, group=gloo)
        except RuntimeError:  # gloo has no such dtype: work it out
            ts = local_reduce(op, dt, [list(ins(q, dt)) for q in range(n)])
        full, red, c0, c1 = ts
        return [full[8 * r:8 * (r + 1)], red if r == 0 else torch.zeros(0, dtype=dt), c0, c1]

    return {(str(dt), ALL_RED.index(op)): (hccl_run(dt, op), reference(dt, op))
            for dt in DTYPES for op in ops_of(dt)}


class TestOps(unittest.TestCase):
    def test_where_ops_run(self):
        for n in (2, 3):
            for r, (got, want) in enumerate(run_torch(n, placements)):
                self.assertEqual(len(got), len(want))
                for i, (h, g) in enumerate(zip(got, want)):
                    self.assertTrue(torch.equal(h, g), f"n {n} rank {r} tensor {i}")

    def test_all_reduce_every_dtype_vs_gloo(self):
        for n in (2, 3):
            for r, got in enumerate(run_torch(n, reductions)):
                for dt in DTYPES:
                    for op in ops_of(dt):
                        h, g = got[(str(dt), ALL_RED.index(op))]
                        want = g if g is not None else local_reference(n, dt, op)
                        self.assertEqual(h.dtype, dt)
                        self.assertTrue(torch.equal(h, want),
                                        f"n {n} rank {r} {dt} {op}: {h} {want}")

    def test_every_other_op_vs_gloo(self):
        def fn(r, n, gloo):
            res = {}

            def pair(name, f, ref=None):
                """hccl's result of f, and gloo's (or of ref, the same result from ops gloo
                has, where gloo lacks f's)."""
                res[name] = (f(None), (ref or f)(gloo))

            def bcast(g):
                t = sample(r, torch.float32)
                dist.broadcast(t, src=n - 1, group=g)
                return t

            def ag(g):
                outs = [torch.zeros(8, dtype=torch.int64) for _ in range(n)]
                dist.all_gather(outs, sample(r, torch.int64, 8), group=g)
                return torch.stack(outs)

            def ag_base(g):
                out = torch.zeros(8 * n)
                dist.all_gather_into_tensor(out, sample(r, torch.float32, 8), group=g)
                return out

            def gathered(g, t):
                outs = [torch.zeros_like(t) for _ in range(n)]
                dist.all_gather(outs, t, group=g)
                return outs

            def rs_ref(g):
                full = torch.cat([sample(r, torch.float32, 8, seed=q) for q in range(n)])
                dist.all_reduce(full, group=g)
                return full[8 * r:8 * (r + 1)]

            def rs_base_ref(g):
                full = sample(r, torch.float64, 8 * n)
                dist.all_reduce(full, group=g)
                return full[8 * r:8 * (r + 1)]

            def a2a_ref(g):
                out = torch.zeros(3 * n)
                dist.all_to_all_single(out, torch.cat([torch.full((3,), float(r * 10 + q))
                                                       for q in range(n)]), group=g)
                return out.reshape(n, 3)

            def rs(g):
                out = torch.zeros(8)
                dist.reduce_scatter(out, [sample(r, torch.float32, 8, seed=q) for q in range(n)],
                                    group=g)
                return out

            def rs_base(g):
                out = torch.zeros(8, dtype=torch.float64)
                dist.reduce_scatter_tensor(out, sample(r, torch.float64, 8 * n), group=g)
                return out

            def a2a(g):
                outs = [torch.zeros(3) for _ in range(n)]
                dist.all_to_all(outs, [torch.full((3,), float(r * 10 + q)) for q in range(n)],
                                group=g)
                return torch.stack(outs)

            def a2a_single_uneven(g):
                ins = torch.arange(sum(q + 1 for q in range(n)), dtype=torch.float32) + 100 * r
                out = torch.zeros(n * (r + 1))
                dist.all_to_all_single(out, ins, output_split_sizes=[r + 1] * n,
                                       input_split_sizes=[q + 1 for q in range(n)], group=g)
                return out

            def a2a_single_even(g):
                out = torch.zeros(4 * n, dtype=torch.int32)
                dist.all_to_all_single(out, sample(r, torch.int32, 4 * n), group=g)
                return out

            def red(g):
                t = sample(r, torch.float32)
                dist.reduce(t, dst=0, op=dist.ReduceOp.MAX, group=g)
                return t if r == 0 else torch.zeros(0)

            def sc(g):
                out = torch.zeros(5)
                parts = [torch.full((5,), float(q)) for q in range(n)] if r == 1 else None
                dist.scatter(out, parts,
                             src=1, group=g)
                return out

            def ga(g):
                outs = [torch.zeros(6) for _ in range(n)] if r == 0 else None
                dist.gather(sample(r, torch.float32, 6), outs, dst=0, group=g)
                return torch.stack(outs) if r == 0 else torch.zeros(0)

            def avg(g):
                t = sample(r, torch.float32)
                dist.all_reduce(t, op=dist.ReduceOp.AVG, group=g) if g is None else (
                    dist.all_reduce(t, group=g), t.div_(n))
                return t

            def coalesced(g):
                ts = [sample(r, torch.float32, 10), sample(r, torch.float32, 3, seed=1)]
                dist.all_reduce_coalesced(ts, group=g)
                return torch.cat(ts)

            for name, f, ref in [("broadcast", bcast, None), ("all_gather", ag, None),
                                 ("all_gather_base", ag_base, lambda g: torch.cat(
                                     gathered(g, sample(r, torch.float32, 8)))),
                                 ("reduce_scatter", rs, rs_ref),
                                 ("reduce_scatter_base", rs_base, rs_base_ref),
                                 ("all_to_all", a2a, a2a_ref),
                                 ("a2a_uneven", a2a_single_uneven, None),
                                 ("a2a_even", a2a_single_even, None), ("reduce", red, None),
                                 ("scatter", sc, None), ("gather", ga, None), ("avg", avg, None),
                                 ("coalesced", coalesced, None)]:
                pair(name, f, ref)
            dist.barrier()
            return res

        for n, socks in PLACEMENTS:
            with self.subTest(n=n, daemons=2 if socks else 1):
                for r, res in enumerate(on_placement(n, fn, socks)):
                    for name, (h, g) in res.items():
                        self.assertTrue(torch.equal(h, g),
                                        f"n {n} rank {r} {name}: {h} vs gloo {g}")

    def test_reducing_ops_every_dtype_async(self):
        """reduce_scatter_tensor, reduce and all_reduce_coalesced on every dtype and op."""
        for n, socks in PLACEMENTS:
            with self.subTest(n=n, daemons=2 if socks else 1):
                for r, res in enumerate(on_placement(n, reducing_ops, socks)):
                    for key, (got, want) in res.items():
                        for i, (h, g) in enumerate(zip(got, want)):
                            self.assertEqual(h.dtype, g.dtype, f"n {n} rank {r} {key} {i}")
                            self.assertTrue(torch.equal(h, g),
                                            f"n {n} rank {r} {key} {i}: {h} vs {g}")

    def test_moving_ops_every_dtype_async(self):
        """The ops that move data, on every dtype, issued with async_op=True and waited on
        afterwards (all in flight at once), against gloo on the same bits (as int16 or uint8
        where gloo lacks the dtype)."""
        for n, socks in PLACEMENTS:
            with self.subTest(n=n, daemons=2 if socks else 1):
                for r, res in enumerate(on_placement(n, moving_ops, socks)):
                    for key, (h, g) in res.items():
                        self.assertTrue(torch.equal(h, g), f"n {n} rank {r} {key}: {h} vs {g}")

    def test_p2p_async_and_noncontiguous(self):
        def fn(r, n, gloo):
            right, left = (r + 1) % n, (r - 1) % n
            got = torch.zeros(4)
            reqs = dist.batch_isend_irecv(
                [dist.P2POp(dist.isend, torch.full((4,), float(r)), right),
                 dist.P2POp(dist.irecv, got, left)])
            for q in reqs:
                q.wait()
            if r == 0:
                dist.send(torch.arange(3.0), dst=n - 1)
            elif r == n - 1:
                x = torch.zeros(3)
                dist.recv(x, src=0)
                assert torch.equal(x, torch.arange(3.0)), x
            m = torch.arange(12.0).reshape(3, 4) * (r + 1)
            col = m[:, 1]  # not contiguous
            work = dist.all_reduce(col, async_op=True)
            fut = work.get_future()
            work.wait()
            return got, m, work.is_completed(), fut.done()

        n = 3
        for r, (got, m, completed, done) in enumerate(run_torch(n, fn)):
            self.assertTrue(torch.equal(got, torch.full((4,), float((r - 1) % n))))
            want = torch.arange(12.0).reshape(3, 4) * (r + 1)
            want[:, 1] = torch.arange(12.0).reshape(3, 4)[:, 1] * sum(range(1, n + 1))
            self.assertTrue(torch.equal(m, want), m)
            self.assertTrue(completed and done)

    def test_isend_irecv_any_order(self):
        """Unbatched isends before irecvs (every rank sends first: a deadlock if they ran in
        one issue order), 1 MiB each way around a ring, then a send that crosses a collective,
        on one daemon and across two; compared with gloo doing the same."""
        def fn(r, n, gloo):
            out = {}
            for name, group in (("hccl", None), ("gloo", gloo)):
                right, left = (r + 1) % n, (r - 1) % n
                mine = torch.arange(256 << 10, dtype=torch.float32) + 1000 * r
                got_l, got_r = torch.zeros(256 << 10), torch.zeros(256 << 10)
                reqs = [dist.isend(mine, right, group=group),
                        dist.isend(mine * 2, left, group=group),
                        dist.irecv(got_l, left, group=group),
                        dist.irecv(got_r, right, group=group)]
                for q in reqs:
                    q.wait()
                # A send whose receive comes after an allreduce on the receiver.
                t = torch.ones(2)
                if r == 0:
                    w = dist.isend(torch.full((3,), 7.0), 1, group=group)
                    dist.all_reduce(t, group=group)
                    w.wait()
                    late = None
                else:
                    dist.all_reduce(t, group=group)
                    late = torch.zeros(3)
                    if r == 1:
                        dist.recv(late, 0, group=group)
                out[name] = (got_l, got_r, t, late)
            return out

        for socks in (None, "two daemons"):
            with self.subTest(socks=socks):
                other = Daemon() if socks else None
                try:
                    res = run_torch(3, fn, socks=[ranks.DAEMON.sock, other.sock, other.sock]
                                    if other else None)
                finally:
                    if other:
                        other.stop()
                for r, out in enumerate(res):
                    want = torch.arange(256 << 10, dtype=torch.float32)
                    self.assertTrue(torch.equal(out["hccl"][0], want + 1000 * ((r - 1) % 3)))
                    self.assertTrue(torch.equal(out["hccl"][1], (want + 1000 * ((r + 1) % 3)) * 2))
                    for a, b in zip(out["hccl"], out["gloo"]):
                        self.assertTrue(a is None and b is None or torch.equal(a, b))

    def test_recv_any_source_and_tags(self):
        """Receives from any source: 3 senders, 2 messages each, sent in a random order after
        random naps, taken with recv and irecv without a source; each says its sender, whose
        messages come in order. Tags: rank 1 sends tag 1 then tag 2 to rank 0, which receives
        tag 2 first (blocking: a deadlock if tags were ignored), and an any-source receive of
        tag 7 gets rank 2's message though rank 3's of tag 5 came first. All as gloo does on
        the same inputs, on one daemon and across two."""
        def fn(r, n, gloo):
            out = {}
            for name, group in (("hccl", None), ("gloo", gloo)):
                rng = np.random.default_rng(r)
                dist.barrier(group=group)
                if r == 0:
                    got = []
                    for i in range(2 * (n - 1)):
                        t = torch.full((5,), -1.0)
                        if i % 2:
                            w = dist.irecv(t, group=group)
                            w.wait()
                            src = w._source_rank()  # pylint: disable=protected-access
                        else:
                            src = dist.recv(t, group=group)
                        got.append((src, t))
                else:
                    time.sleep(rng.uniform(0, 0.2))
                    for k in range(2):
                        dist.send(torch.full((5,), 10.0 * r + k), 0, group=group)
                        time.sleep(rng.uniform(0, 0.05))
                    got = None
                # Tags out of order, and an any-source receive by tag.
                tagged = None
                if r == 1:
                    w = [dist.isend(torch.full((3,), 1.0), 0, group=group, tag=1),
                         dist.isend(torch.full((3,), 2.0), 0, group=group, tag=2)]
                    for x in w:
                        x.wait()
                elif r == 3:
                    dist.send(torch.full((3,), 5.0), 0, group=group, tag=5)
                elif r == 2:
                    time.sleep(0.2)
                    dist.send(torch.full((3,), 7.0), 0, group=group, tag=7)
                else:
                    two, one = torch.zeros(3), torch.zeros(3)
                    dist.recv(two, 1, group=group, tag=2)
                    dist.recv(one, 1, group=group, tag=1)
                    seven, five = torch.zeros(3), torch.zeros(3)
                    time.sleep(0.1)  # rank 3's tag 5 has come by now
                    from_seven = dist.recv(seven, group=group, tag=7)
                    from_five = dist.recv(five, group=group, tag=5)
                    tagged = (two, one, seven, five, from_seven, from_five)
                out[name] = (got, tagged)
            return out

        for socks in (None, "two daemons"):
            with self.subTest(socks=socks):
                other = Daemon() if socks else None
                try:
                    res = run_torch(4, fn, socks=[ranks.DAEMON.sock, other.sock] * 2
                                    if other else None)
                finally:
                    if other:
                        other.stop()
                got = res[0]["hccl"][0]
                self.assertEqual(sorted(src for src, _ in got), [1, 1, 2, 2, 3, 3])
                for src, t in got:
                    first = [x for q, x in got if q == src][0]
                    k = 0 if t is first else 1
                    self.assertTrue(torch.equal(t, torch.full((5,), 10.0 * src + k)),
                                    f"from {src}: {t}")
                g = res[0]["gloo"][0]
                self.assertEqual(sorted((q, t.tolist()) for q, t in got),
                                 sorted((q, t.tolist()) for q, t in g))
                two, one, seven, five, from_seven, from_five = res[0]["hccl"][1]
                self.assertEqual((two.tolist(), one.tolist(), seven.tolist(), five.tolist(),
                                  from_seven, from_five),
                                 ([2.0] * 3, [1.0] * 3, [7.0] * 3, [5.0] * 3, 2, 3))
                gt = res[0]["gloo"][1]
                self.assertEqual([x.tolist() if torch.is_tensor(x) else x for x in gt],
                                 [x.tolist() if torch.is_tensor(x) else x
                                  for x in res[0]["hccl"][1]])

    def test_uneven_all_gather_and_reduce_scatter(self):
        """all_gather into outputs of different sizes (one empty) and reduce_scatter of inputs of
        different sizes, through HcclAllGatherV and HcclReduceScatterV, compared element by
        element with the result worked out here, on one daemon and across two."""
        sizes = [3, 0, 70000, 2]

        def fn(r, n, gloo):
            k = sizes[:n]
            outs = [torch.full((x,), -1.0) for x in k]
            dist.all_gather(outs, torch.arange(k[r], dtype=torch.float32) + 100 * r)
            out = torch.full((k[r],), -1.0)
            dist.reduce_scatter(out, [torch.arange(x, dtype=torch.float32) * (r + 1) + q
                                      for q, x in enumerate(k)])
            mx = torch.full((k[r],), -1, dtype=torch.int32)
            dist.reduce_scatter(mx, [torch.arange(x, dtype=torch.int32) + r for x in k],
                                op=dist.ReduceOp.MAX)
            return outs, out, mx

        for n, socks in ((3, None), (4, "two daemons")):
            with self.subTest(n=n, socks=socks):
                other = Daemon() if socks else None
                try:
                    res = run_torch(n, fn, socks=[ranks.DAEMON.sock, other.sock] * (n // 2)
                                    if other else None)
                finally:
                    if other:
                        other.stop()
                k = sizes[:n]
                for r, (outs, out, mx) in enumerate(res):
                    for q, o in enumerate(outs):
                        self.assertTrue(torch.equal(o, torch.arange(k[q], dtype=torch.float32)
                                                    + 100 * q), f"rank {r} from {q}")
                    want = torch.arange(k[r], dtype=torch.float32) * sum(range(1, n + 1)) + n * r
                    self.assertTrue(torch.equal(out, want), f"rank {r}: {out[:4]}")
                    self.assertTrue(torch.equal(mx, torch.arange(k[r], dtype=torch.int32) + n - 1))

    def test_gather_in_batches_and_the_batch_bound(self):
        """gather's root takes its receives in batches of at most BATCH_SEND_RECV_MAX (here
        made 1 in this process, so that 4 ranks need 3 batches; a batch of more would fail),
        against gloo; a batch_isend_irecv of more
        items than a batch takes is refused by name, and the group goes on."""
        def fn(r, n, gloo):
            hccl.torch.BATCH_SEND_RECV_MAX = hccl.comm.BATCH_SEND_RECV_MAX = 1
            t = torch.arange(5, dtype=torch.int32) + 100 * r
            outs = [[torch.zeros(5, dtype=torch.int32) for _ in range(n)] if r == 2 else None
                    for _ in range(2)]
            dist.gather(t, outs[0], dst=2)
            dist.gather(t, outs[1], dst=2, group=gloo)
            try:
                dist.batch_isend_irecv([dist.P2POp(dist.isend, t, (r + 1) % n)] * 2)
                refused = None
            except RuntimeError as e:
                refused = str(e)
            after = torch.ones(2)
            dist.all_reduce(after)
            return outs, refused, after

        for r, (outs, refused, after) in enumerate(run_torch(4, fn)):
            if r == 2:
                self.assertEqual([o.tolist() for o in outs[0]], [o.tolist() for o in outs[1]])
            self.assertIn("hccl batch_isend_irecv: 2 sends and receives, at most 1", refused)
            self.assertTrue(torch.equal(after, torch.full((2,), 4.0)))

    def test_groups(self):
        def fn(r, n, gloo):
            evens = dist.new_group([0, 2])
            pair = dist.new_group([1, 2])
            out = {}
            if r in (0, 2):
                t = torch.tensor([float(r + 1)])
                dist.all_reduce(t, group=evens)
                out["evens"] = t.item()
            if r in (1, 2):
                t = torch.tensor([float(r + 1)])
                dist.all_reduce(t, group=pair)
                out["pair"] = t.item()
            out["member"] = dist.get_rank(evens)
            return out

        res = run_torch(3, fn)
        self.assertEqual(res[0], {"evens": 4.0, "member": 0})
        self.assertEqual(res[1], {"pair": 5.0, "member": -1})
        self.assertEqual(res[2], {"evens": 4.0, "pair": 5.0, "member": 1})

    def test_errors(self):
        def fn(r, n, gloo):
            msgs = []
            pg = dist.distributed_c10d._get_default_group()  # pylint: disable=protected-access
            for call in (lambda: pg.allreduce([torch.zeros(2, dtype=torch.complex64)]),
                         lambda: dist.all_reduce(torch.zeros(2), op=dist.ReduceOp.BAND),
                         lambda: dist.all_reduce(torch.zeros(2),
                                                 op=dist._make_nccl_premul_sum(2.0))):
                try:
                    call()
                    msgs.append(None)
                except RuntimeError as e:
                    msgs.append(str(e))
            t = torch.ones(2)
            dist.all_reduce(t)  # the group still works
            # torch itself sends complex tensors as pairs of reals (SUM): as gloo does.
            c = (torch.arange(4.0) + 1j * r).to(torch.complex64)
            cg = c.clone()
            dist.all_reduce(c)
            dist.all_reduce(cg, group=gloo)
            return msgs, t, torch.equal(c, cg)

        for msgs, t, complex_ok in run_torch(2, fn):
            self.assertTrue(complex_ok)
            self.assertIn("hccl allreduce: the dtype torch.complex64 is not supported", msgs[0])
            self.assertIn("hccl allreduce: ReduceOp.BAND needs an integer or bool tensor, got "
                          "torch.float32", msgs[1])
            self.assertIn("hccl allreduce: ReduceOp.PREMUL_SUM is not supported: torch 1.13",
                          msgs[2])
            self.assertTrue(torch.equal(t, torch.full((2,), 2.0)))


class TestFailures(unittest.TestCase):
    """A rank that never joins, an op that outlives the group's timeout, a peer killed mid-op:
    a RuntimeError that says so, within bounded time, never a hang."""

    def test_rank_never_joins(self):
        def alone(q):
            store = dist.TCPStore("127.0.0.1", free_port(), 2, True, wait_for_workers=False)
            t0 = time.monotonic()
            try:
                hccl.torch.ProcessGroupHCCL(dist.PrefixStore("g", store), 0, 2,
                                            datetime.timedelta(seconds=2))
                q.put((None, time.monotonic() - t0))
            except RuntimeError as e:
                q.put((str(e), time.monotonic() - t0))

        # In a child: this process's libhccl may still know an earlier module's daemon.
        q = _ctx.Queue()
        p = _ctx.Process(target=alone, args=(q,))
        p.start()
        msg, waited = q.get(timeout=60)
        p.join(10)
        self.assertEqual(msg, "hccl init: rank(s) [1] of 2 did not join within 0:00:02")
        self.assertLess(waited, 30)

    def test_wait_timeout(self):
        """Work.wait(timeout) raises RuntimeError once the timeout passes with a peer away; the
        op completes when the peer comes, and the group goes on."""
        def fn(r, n, gloo):
            t = torch.full((32768,), float(r + 1))  # 128 KiB: queued, not run inline
            if r == 1:
                time.sleep(2)
            work = dist.all_reduce(t, async_op=True)
            out = {"msg": None, "waited": 0.0}
            if r == 0:
                t0 = time.monotonic()
                try:
                    work.wait(timeout=datetime.timedelta(milliseconds=300))
                except RuntimeError as e:
                    out["msg"] = str(e)
                out["waited"] = time.monotonic() - t0
            work.wait()
            nxt = torch.ones(4)
            dist.all_reduce(nxt)
            out["sum"], out["next"] = t, nxt
            return out

        res = run_torch(2, fn)
        self.assertEqual(res[0]["msg"], "hccl allreduce: not complete within the wait's timeout "
                                        "(0.3 s); it goes on")
        self.assertLess(res[0]["waited"], 1.5)
        for r in range(2):
            self.assertTrue(torch.equal(res[r]["sum"], torch.full((32768,), 3.0)))
            self.assertTrue(torch.equal(res[r]["next"], torch.full((4,), 2.0)))

    def test_op_outlives_group_timeout(self):
        def fn(r, n, gloo):
            if r == 1:  # stays away from the allreduce for longer than the group's timeout
                time.sleep(8)
                return []
            msgs = []
            for _ in range(2):
                try:
                    dist.all_reduce(torch.ones(4))
                    msgs.append(None)
                except RuntimeError as e:
                    msgs.append(str(e))
            return msgs

        for socks in (None, "two daemons"):
            with self.subTest(socks=socks):
                other = Daemon() if socks else None
                try:
                    res = run_torch(2, fn, socks=[ranks.DAEMON.sock, other.sock] if other else None,
                                    pg_timeout=datetime.timedelta(seconds=3))
                finally:
                    if other:
                        other.stop()
                self.assertRegex(res[0][0], r"^hccl allreduce: HcclAllReduce: .*\(9\)$")
                self.assertRegex(res[0][1], r"^hccl allreduce: the group is unusable: hccl "
                                 r"allreduce: HcclAllReduce: .*\(9\)$")

    def test_abort(self):
        """hccl.torch.abort: rank 0's ops under way (an allreduce rank 1 is late for, a receive
        nobody sends) and queued fail at once with RuntimeError naming the abort, as does a
        later op; rank 1's allreduce fails in seconds, not at the group's timeout (60 s)."""
        def fn(r, n, gloo):
            if r == 1:
                time.sleep(1.0)
                t0 = time.monotonic()
                try:
                    dist.all_reduce(torch.ones(1 << 16))
                    return None, 0.0
                except RuntimeError as e:
                    return str(e), time.monotonic() - t0
            works = [dist.all_reduce(torch.ones(1 << 16), async_op=True),
                     dist.all_reduce(torch.ones(4), async_op=True),
                     dist.irecv(torch.zeros(4), src=1)]
            time.sleep(0.3)
            t0 = time.monotonic()
            hccl.torch.abort()
            msgs = []
            for w in works:
                try:
                    w.wait()
                    msgs.append(None)
                except RuntimeError as e:
                    msgs.append(str(e))
            waited = time.monotonic() - t0
            try:
                dist.all_reduce(torch.ones(4))
                msgs.append(None)
            except RuntimeError as e:
                msgs.append(str(e))
            return msgs, waited

        res = run_torch(2, fn, pg_timeout=datetime.timedelta(seconds=60))
        msgs, waited = res[0]
        self.assertLess(waited, 5.0)
        for what, msg in zip(("allreduce", "allreduce", "recv", "allreduce"), msgs):
            self.assertRegex(msg or "", rf"^hccl {what}: the group is unusable: rank 0 aborted "
                             r"the group$")
        msg, waited = res[1]
        self.assertRegex(msg or "", r"^hccl allreduce: ")
        self.assertLess(waited, 10.0)

    def test_recv_any_source_nobody_sends(self):
        """A receive from any source that no rank ever sends to: RuntimeError within the group's
        timeout (3 s here), naming the tag; the group goes on."""
        def fn(r, n, gloo):
            msg, waited = None, 0.0
            if r == 0:
                t0 = time.monotonic()
                try:
                    dist.recv(torch.zeros(2), tag=9)
                except RuntimeError as e:
                    msg = str(e)
                waited = time.monotonic() - t0
            dist.barrier(group=gloo)
            t = torch.ones(2)
            dist.all_reduce(t)
            return msg, waited, t

        res = run_torch(2, fn, pg_timeout=datetime.timedelta(seconds=3))
        msg, waited, t = res[0]
        self.assertRegex(msg or "", r"^hccl recv: no rank sent this rank a message of tag 9 "
                         r"within 0:00:03$")
        self.assertLess(waited, 10.0)
        self.assertTrue(torch.equal(t, torch.full((2,), 2.0)))

    def test_send_to_a_rank_gone(self):
        """A send to a rank that died before it received anything: a RuntimeError that names
        it, as soon as the group's comm reports the death (not the group's timeout, 3 s here,
        nor HCCL_CONNECT_TIMEOUT's 120 s)."""
        def fn(r, n, gloo):
            if r == 1:
                os.kill(os.getpid(), signal.SIGKILL)
            t0 = time.monotonic()
            try:
                dist.send(torch.ones(4), 1)
                return None, 0.0
            except RuntimeError as e:
                return str(e), time.monotonic() - t0

        msg, waited = run_torch(2, fn, answer=[0], pg_timeout=datetime.timedelta(seconds=3))[0]
        # The group's comm says rank 1 is gone (HcclGetCommAsyncError, nothing in flight).
        self.assertRegex(msg or "", r"^hccl send: .*p2p from rank 0 to rank 1: rank 1 is gone "
                         r"\(the group's comm failed: HcclResult 21\)")
        self.assertLess(waited, 60)

    def test_peer_killed_mid_op(self):
        def fn(r, n, gloo):
            if r == 1:  # dies while rank 0 waits in the allreduce
                time.sleep(1)
                os.kill(os.getpid(), signal.SIGKILL)
            work = dist.all_reduce(torch.ones(8 << 20), async_op=True)
            t0 = time.monotonic()
            try:
                work.wait()
                return None, 0.0
            except RuntimeError as e:
                return str(e), time.monotonic() - t0

        for socks in (None, "two daemons"):
            with self.subTest(socks=socks):
                other = Daemon() if socks else None
                try:
                    res = run_torch(2, fn, socks=[ranks.DAEMON.sock, other.sock] if other else None,
                                    answer=[0])
                finally:
                    if other:
                        other.stop()
                msg, waited = res[0]
                self.assertRegex(msg or "", r"^hccl allreduce: HcclAllReduce: .*\(21\)$")
                self.assertLess(waited, 30)


RESTART_RUN_S = 9.0  # each rank's loop; the daemon stops at 2.5 s and crashes at 5.5 s


def _restart_loop(r, n, gloo):
    """Checked torch ops until RESTART_RUN_S has passed (the ranks agree over gloo): allreduce
    sync and async against gloo on the same inputs, broadcast, all_gather and send/recv (which
    go through the daemon). Returns (ops, wrong, slowest op in s)."""
    ops = wrong = i = 0
    slowest, t_end = 0.0, time.monotonic() + RESTART_RUN_S
    while True:
        stop = torch.tensor([int(time.monotonic() > t_end)])
        dist.all_reduce(stop, op=dist.ReduceOp.MAX, group=gloo)
        if stop.item():
            return ops, wrong, slowest
        t0 = time.monotonic()
        x = sample(r, torch.float32, count=4096, seed=i)
        a, b = x.clone(), x.clone()
        dist.all_reduce(a)
        dist.all_reduce(b, group=gloo)
        big = torch.full((1 << 18,), float(r + i))
        dist.all_reduce(big, async_op=True).wait()
        c = torch.full((64,), float(i if r == 0 else -1))
        dist.broadcast(c, 0)
        g = [torch.zeros(8) for _ in range(n)]
        dist.all_gather(g, torch.full((8,), float(r * 10 + i)))
        p = torch.full((1000,), float(i)) if r == 0 else torch.zeros(1000)
        if r == 0:
            dist.send(p, 1)
        else:
            dist.recv(p, 0)
        wrong += (not torch.equal(a, b)) + (not torch.all(big == float(n * i + n * (n - 1) // 2)))
        wrong += (not torch.all(c == float(i))) + (not torch.all(p == float(i)))
        wrong += sum(not torch.all(g[q] == float(q * 10 + i)) for q in range(n))
        ops += 5
        i += 1
        slowest = max(slowest, time.monotonic() - t0)


class TestDaemonRestart(unittest.TestCase):
    """Issue 37: with op retry on (HCCL_OP_RETRY_ENABLE="L0:1"), the ranks' daemon is stopped
    and started again (an upgrade), then killed and started again (a crash), under a loop of
    torch ops: no op fails, every result equals gloo's or the exact value, and the daemon that
    ends the run counts both ranks back."""

    def test_stop_and_crash_under_a_loop(self):
        d = Daemon()
        daemons = [d]
        os.environ["HCCL_OP_RETRY_ENABLE"] = "L0:1"

        def faults():
            for at, sig in ((2.5, signal.SIGTERM), (5.5, signal.SIGKILL)):
                time.sleep(at - (time.monotonic() - t0))
                daemons[-1].proc.send_signal(sig)
                daemons[-1].proc.wait(10)
                time.sleep(0.3)
                daemons.append(Daemon(dir=d.dir))

        t0 = time.monotonic()
        th = threading.Thread(target=faults)
        th.start()
        try:
            res = run_torch(2, _restart_loop, timeout=90, socks=[d.sock, d.sock])
            th.join()
            out = subprocess.run([hccl.daemon.tool("hccld-ctl"), "--admin-socket", daemons[-1].admin,
                                  "--json", "status"], capture_output=True, text=True,
                                 check=True).stdout
        finally:
            del os.environ["HCCL_OP_RETRY_ENABLE"]
            th.join()
            daemons[-1].stop()
            shutil.rmtree(d.dir, ignore_errors=True)
        st = json.loads(out)
        self.assertEqual(len(daemons), 3)
        for r, (ops, wrong, slowest) in enumerate(res):
            print(f"rank {r}: {ops} ops across a stop and a crash of the daemon, {wrong} wrong, "
                  f"slowest iteration {slowest:.2f} s", file=sys.stderr)
            self.assertGreater(ops, 0)
            self.assertEqual(wrong, 0)
        self.assertEqual(st["clients_rejoined"], 2)
        self.assertGreaterEqual(st["comms_rejoined"], 1)
        self.assertEqual(st["rejoining"], [])


    def restart_each_daemon(self, sig):
        """Each rank on a daemon of its own (a comm across daemons, L1:1): daemon 1 gets sig and
        is started again on the same sockets and port, then daemon 0. No op fails, every result
        is exact, and each new daemon counts its rank back."""
        listen = [f"127.0.0.1:{free_port()}" for _ in range(2)]
        first = [Daemon(listen=listen[k]) for k in range(2)]
        cur = list(first)
        os.environ["HCCL_OP_RETRY_ENABLE"] = "L1:1"

        def faults():
            for at, k in ((2.5, 1), (5.0, 0)):
                time.sleep(max(0.0, at - (time.monotonic() - t0)))
                cur[k].proc.send_signal(sig)
                cur[k].proc.wait(10)
                time.sleep(0.3)
                cur[k] = Daemon(listen=listen[k], dir=first[k].dir)

        t0 = time.monotonic()
        th = threading.Thread(target=faults)
        th.start()
        try:
            res = run_torch(2, _restart_loop, timeout=90, socks=[d.sock for d in first])
            th.join()
            sts = [json.loads(subprocess.run([hccl.daemon.tool("hccld-ctl"), "--admin-socket",
                                              d.admin, "--json", "status"], capture_output=True,
                                             text=True, check=True).stdout) for d in cur]
        finally:
            del os.environ["HCCL_OP_RETRY_ENABLE"]
            th.join()
            for k in range(2):
                cur[k].stop()
                shutil.rmtree(first[k].dir, ignore_errors=True)
        for r, (ops, wrong, slowest) in enumerate(res):
            print(f"rank {r}: {ops} ops across a {signal.Signals(sig).name} of each of its 2 "
                  f"daemons, {wrong} wrong, slowest iteration {slowest:.2f} s", file=sys.stderr)
            self.assertGreater(ops, 0)
            self.assertEqual(wrong, 0)
        for st in sts:
            self.assertEqual(st["clients_rejoined"], 1)
            self.assertGreaterEqual(st["comms_rejoined"], 1)
            self.assertEqual(st["rejoining"], [])

    def test_rolling_upgrade_across_daemons(self):
        """Every node upgraded in turn: SIGTERM (span/drain.c)."""
        self.restart_each_daemon(signal.SIGTERM)

    def test_crash_across_daemons(self):
        """Each of the 2 daemons crashes in turn: SIGKILL (span/rerun.c, span/p2p_log.c)."""
        self.restart_each_daemon(signal.SIGKILL)


PROG = ("import os, sys, torch, torch.distributed as dist\n"
        "import hccl.torch\n"
        "dist.init_process_group('hccl')\n"
        "t = torch.tensor([float(dist.get_rank() + 1)])\n"
        "dist.all_reduce(t)\n"
        "open(os.path.join(sys.argv[1], os.environ['RANK']), 'w').write(str(t.item()))\n"
        "dist.destroy_process_group()\n")


class TestLaunch(unittest.TestCase):
    """Every rank forms the group from the environment (env://), reduces, and exits 0: rank 0,
    which serves the TCPStore, once aborted at exit with its group left open."""

    def launch(self, argv_for, n=3):
        out_dir = tempfile.mkdtemp(prefix="hccl-launch-")
        prog = os.path.join(out_dir, "prog.py")
        with open(prog, "w") as f:
            f.write(PROG)
        env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"), OMP_NUM_THREADS="1")
        try:
            codes = argv_for(prog, out_dir, env)
            got = {f: open(os.path.join(out_dir, f)).read()
                   for f in sorted(os.listdir(out_dir)) if f != "prog.py"}
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        self.assertEqual(codes, [0] * len(codes))
        total = str(float(sum(range(1, n + 1))))
        self.assertEqual(got, {str(r): total for r in range(n)})

    def test_env_ranks(self):
        def run(prog, out_dir, env):
            port = str(free_port())
            procs = [subprocess.Popen([sys.executable, prog, out_dir], env=dict(
                env, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(r), WORLD_SIZE="3"))
                     for r in range(3)]
            return [p.wait(timeout=120) for p in procs]

        self.launch(run)

    def test_torchrun(self):
        def run(prog, out_dir, env):
            # --redirects/--tee 1: Debian's torch 1.13 on Python 3.11 fails to parse the default
            # "0" (enum.Flag no longer yields NONE when iterated), whatever the backend.
            return [subprocess.run(
                [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee", "1",
                 "--nproc_per_node", "3", "--master_port", str(free_port()), prog, out_dir],
                env=env, timeout=120, capture_output=True, check=False).returncode]

        self.launch(run)

    def test_torchrun_two_nodes(self):
        """torchrun --nnodes 2 (static rendezvous on loopback), 2 ranks per node, each node's
        ranks on a daemon of their own."""
        other = Daemon()

        def run(prog, out_dir, env):
            port, procs = free_port(), []
            for node, sock in enumerate((ranks.DAEMON.sock, other.sock)):
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "torch.distributed.run", "--redirects", "1", "--tee",
                     "1", "--nnodes", "2", "--node_rank", str(node), "--nproc_per_node", "2",
                     "--master_addr", "127.0.0.1", "--master_port", str(port), prog, out_dir],
                    env=dict(env, HCCLD_SOCKET=sock), stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL))
            try:
                return [p.wait(timeout=120) for p in procs]
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()

        try:
            self.launch(run, n=4)
        finally:
            other.stop()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(64, 512)
        self.bn = torch.nn.BatchNorm1d(512)
        self.b = torch.nn.Linear(512, 512)
        self.c = torch.nn.Linear(512, 10)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.bn(self.a(x))))))


class Branchy(Net):
    """Net with a layer that no step uses (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        self.unused = torch.nn.Linear(10, 10)


def train(group, bucket_mb, r, steps=20, accumulate=1, hook=None, **ddp_args):
    """SGD steps of DDP over group; with accumulate > 1, all but the last micro-batch of each
    step run under no_sync(); hook: a built-in comm hook (its state is the group)."""
    torch.manual_seed(0)
    model = Branchy() if ddp_args.get("find_unused_parameters") else Net()
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                    bucket_cap_mb=bucket_mb, **ddp_args)
    if hook is not None:
        ddp.register_comm_hook(group, hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + r)
    for _ in range(steps):
        opt.zero_grad()
        for k in range(accumulate):
            x, y = torch.randn(16, 64, generator=g), torch.randint(0, 10, (16,), generator=g)
            if k + 1 < accumulate:
                with ddp.no_sync():
                    torch.nn.functional.cross_entropy(ddp(x), y).backward()
            else:
                torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


class TestDDP(unittest.TestCase):
    def test_ddp_bit_identical_to_gloo(self):
        def fn(r, n, gloo):
            return {mb: (train(None, mb, r), train(gloo, mb, r)) for mb in (0.25, 25)}

        self.assertGreater(sum(p.numel() for p in Net().parameters()) * 4, 1 << 20)
        for r, res in enumerate(run_torch(2, fn)):
            for mb, (h, g) in res.items():
                for i, (a, b) in enumerate(zip(h, g)):
                    self.assertTrue(torch.equal(a, b), f"rank {r} bucket {mb} MB param {i}")
                self.assertFalse(torch.equal(h[0], Net().a.weight))

    def test_ddp_registered_buckets(self):
        """hccl.torch_hooks.registered_allreduce_hook: the buckets' buffers registered with
        hcclD (re-registered when DDP rebuilds them after the first step), bit-identical to
        gloo under DDP's own allreduce hook, on 2 ranks."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        from hccl.torch_hooks import registered_allreduce_hook

        def fn(r, n, gloo):
            h = train(None, 1, r, steps=10, hook=registered_allreduce_hook)
            pg = dist.distributed_c10d._get_default_group()  # pylint: disable=protected-access
            regs = sorted(k for k, (_, reg) in pg._buckets.items() if reg is not None)
            return h, train(gloo, 1, r, steps=10, hook=default_hooks.allreduce_hook), regs

        for r, (h, g, regs) in enumerate(run_torch(2, fn)):
            for i, (a, b) in enumerate(zip(h, g)):
                self.assertTrue(torch.equal(a, b), f"rank {r} param {i}")
            self.assertGreaterEqual(len(regs), 2, regs)  # 1 MB buckets of a 1.3 MB model

    def test_ddp_fp16_compress_hook(self):
        """The built-in fp16_compress_hook (gradients sent as float16, divided first): 2 ranks
        bit-identical to gloo under the same hook, 3 ranks across 2 daemons allclose."""
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        def fn(r, n, gloo):
            hook = default_hooks.fp16_compress_hook
            return train(None, 25, r, steps=10, hook=hook), train(gloo, 25, r, steps=10, hook=hook)

        for r, (h, g) in enumerate(run_torch(2, fn)):
            for i, (a, b) in enumerate(zip(h, g)):
                self.assertTrue(torch.equal(a, b), f"rank {r} param {i}")
        other = Daemon()
        try:
            res = run_torch(3, fn, timeout=120, socks=[ranks.DAEMON.sock, other.sock, other.sock])
        finally:
            other.stop()
        for r, (h, g) in enumerate(res):
            for i, (a, b) in enumerate(zip(h, g)):
                self.assertTrue(torch.allclose(a, b, rtol=1e-3, atol=1e-4), f"rank {r} param {i}")

    def test_ddp_three_ranks_two_daemons(self):
        """3 ranks, 2 of them on a second daemon: close to gloo (sums of 3 may be added in
        another order), under no_sync() accumulation, find_unused_parameters and
        gradient_as_bucket_view."""
        variants = {"plain": {}, "no_sync": {"accumulate": 2},
                    "unused": {"find_unused_parameters": True},
                    "bucket_view": {"gradient_as_bucket_view": True}}

        def fn(r, n, gloo):
            return {k: (train(None, 1, r, steps=8, **v), train(gloo, 1, r, steps=8, **v))
                    for k, v in variants.items()}

        other = Daemon()
        try:
            res = run_torch(3, fn, timeout=120, socks=[ranks.DAEMON.sock, other.sock, other.sock])
        finally:
            other.stop()
        for r, per in enumerate(res):
            for k, (h, g) in per.items():
                for i, (a, b) in enumerate(zip(h, g)):
                    self.assertTrue(torch.allclose(a, b, rtol=1e-4, atol=1e-6),
                                    f"rank {r} {k} param {i}: {(a - b).abs().max()}")


if __name__ == "__main__":
    unittest.main()
