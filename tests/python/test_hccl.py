"""The hccl Python package against a private hccld: every collective on numpy arrays, every data
type and reduce op, compared element by element with numpy's result on the same inputs; streams,
HcclMemAlloc arrays, buffer-protocol objects, splits, the launcher environment, and the errors
(HcclError with the exact HcclResult, ValueError/TypeError for buffers that cannot work)."""
import array
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

import ranks
from ranks import (TOP, Daemon, hccl, run_ranks,  # noqa: F401 (unittest finds the last two)
                   setUpModule, tearDownModule)

DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64,
          np.float16, np.float32, np.float64]
OPS = {hccl.SUM: np.add, hccl.PROD: np.multiply, hccl.MAX: np.maximum, hccl.MIN: np.minimum}
COUNT = 1000


def values(rank, dtype, count=COUNT, seed=0):
    """Small integers (exact in every type, so any order of reduction gives the same result);
    1..3 so that products stay small."""
    rng = np.random.default_rng(seed * 1000 + rank * 31 + np.dtype(dtype).num)
    return rng.integers(1, 4, size=count).astype(dtype)


def reference(n, dtype, op, count=COUNT, seed=0):
    out = values(0, dtype, count, seed)
    for r in range(1, n):
        out = OPS[op](out, values(r, dtype, count, seed)).astype(dtype)
    return out


def every_reduction(comm, r, n):
    return {(np.dtype(d).name, int(op)): comm.all_reduce(values(r, d), op=op)
            for d in DTYPES for op in OPS}


class TestReductions(unittest.TestCase):
    def test_all_reduce_every_dtype_and_op(self):
        for n in (2, 3):
            for r, got in enumerate(run_ranks(n, every_reduction)):
                for d in DTYPES:
                    for op in OPS:
                        want = reference(n, d, op)
                        have = got[(np.dtype(d).name, int(op))]
                        self.assertEqual(have.dtype, np.dtype(d))
                        np.testing.assert_array_equal(have, want,
                                                      err_msg=f"n {n} rank {r} {d} {op}")

    def test_bfloat16_on_uint16_storage(self):
        def bf16(x):
            return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint16)

        def fn(comm, r, n):
            return comm.all_reduce(bf16(values(r, np.float32)), dtype=hccl.DataType.BFP16)

        for got in run_ranks(3, fn):
            np.testing.assert_array_equal(got, bf16(reference(3, np.float32, hccl.SUM)))

    def test_reduce_and_reduce_scatter(self):
        def fn(comm, r, n):
            red = comm.reduce(values(r, np.float32), op=hccl.MAX, root=n - 1)
            rs = comm.reduce_scatter(values(r, np.int32, count=n * 7))
            return red, rs

        n = 3
        for r, (red, rs) in enumerate(run_ranks(n, fn)):
            if r == n - 1:
                np.testing.assert_array_equal(red, reference(n, np.float32, hccl.MAX))
            want = reference(n, np.int32, hccl.SUM, count=n * 7)[r * 7:(r + 1) * 7]
            np.testing.assert_array_equal(rs, want)


def movers(comm, r, n):
    out = {}
    b = values(r, np.int64)
    out["broadcast"] = comm.broadcast(b, root=1).copy()
    out["all_gather"] = comm.all_gather(values(r, np.float64, count=5))
    out["all_to_all"] = comm.all_to_all(np.arange(n * 4, dtype=np.int32) + 100 * r)
    sc = np.array([q + 1 for q in range(n)], np.uint64)  # send q + 1 elements to rank q
    sd = np.concatenate([[0], np.cumsum(sc)[:-1]]).astype(np.uint64)
    rc = np.full(n, r + 1, np.uint64)  # receive r + 1 from everyone
    rd = np.arange(n, dtype=np.uint64) * (r + 1)
    recv = np.zeros(n * (r + 1), np.float32)
    comm.all_to_all_v(np.arange(int(sc.sum()), dtype=np.float32) + 1000 * r, sc, sd, recv, rc,
                      rd)
    out["all_to_all_v"] = recv
    s = np.zeros(3, np.uint8)
    comm.scatter(np.arange(3 * n, dtype=np.uint8) if r == 0 else None, s, root=0)
    out["scatter"] = s
    comm.barrier()
    if r == 0:
        comm.send(np.arange(6, dtype=np.int16), n - 1)
    if r == n - 1:
        out["recv"] = comm.recv(np.zeros(6, np.int16), 0)
    right, left = (r + 1) % n, (r - 1) % n
    got = np.zeros(4, np.int32)
    comm.batch_send_recv([(hccl.SEND, np.full(4, r, np.int32), right), (hccl.RECV, got, left)])
    out["batch"] = got
    return out


class TestMovers(unittest.TestCase):
    def test_every_other_collective(self):
        for n in (2, 3):
            for r, o in enumerate(run_ranks(n, movers)):
                np.testing.assert_array_equal(o["broadcast"], values(1, np.int64))
                np.testing.assert_array_equal(
                    o["all_gather"],
                    np.concatenate([values(q, np.float64, count=5) for q in range(n)]))
                np.testing.assert_array_equal(
                    o["all_to_all"],
                    np.concatenate([np.arange(r * 4, r * 4 + 4) + 100 * q for q in range(n)]))
                # From rank q: its block for r starts at sum(1..r) and has r + 1 elements.
                start = r * (r + 1) // 2
                np.testing.assert_array_equal(
                    o["all_to_all_v"],
                    np.concatenate([np.arange(start, start + r + 1) + 1000 * q
                                    for q in range(n)]).astype(np.float32))
                np.testing.assert_array_equal(o["scatter"], np.arange(3 * r, 3 * r + 3))
                if r == n - 1:
                    np.testing.assert_array_equal(o["recv"], np.arange(6))
                np.testing.assert_array_equal(o["batch"], np.full(4, (r - 1) % n))


def most_items(comm, r, n):
    """A batch of the most items: half sends to the next rank, half receives from the one
    before; then one item more, refused before anything moves."""
    half = hccl.BATCH_SEND_RECV_MAX // 2
    outs = [np.full(3, r * 1000 + i, np.int32) for i in range(half)]
    ins = [np.full(3, -1, np.int32) for _ in range(half)]
    comm.batch_send_recv([(hccl.SEND, o, (r + 1) % n) for o in outs] +
                         [(hccl.RECV, b, (r - 1) % n) for b in ins])
    try:
        comm.batch_send_recv([(hccl.SEND, outs[0], (r + 1) % n)] *
                             (hccl.BATCH_SEND_RECV_MAX + 1))
        refused = None
    except ValueError as e:
        refused = str(e)
    return np.stack(ins), refused


class TestBatch(unittest.TestCase):
    def test_the_most_items(self):
        with open(os.path.join(TOP, "libclient/include/hccl/hccl.h"), encoding="utf-8") as f:
            self.assertIn(f"#define HCCL_BATCH_SEND_RECV_MAX {hccl.BATCH_SEND_RECV_MAX}\n",
                          f.read())
        n = 3
        for r, (got, refused) in enumerate(run_ranks(n, most_items)):
            want = (r - 1) % n * 1000 + np.arange(hccl.BATCH_SEND_RECV_MAX // 2)
            np.testing.assert_array_equal(got, np.repeat(want[:, None], 3, axis=1))
            self.assertIn(f"a batch of {hccl.BATCH_SEND_RECV_MAX + 1} sends and receives: at "
                          f"most {hccl.BATCH_SEND_RECV_MAX}", refused)


class TestBuffers(unittest.TestCase):
    def test_stream_and_zero_copy_and_buffer_protocol(self):
        def fn(comm, r, n):
            with hccl.Stream() as s:
                outs = [comm.all_reduce(values(r, np.float32, seed=k), stream=s) for k in range(4)]
                s.synchronize()
                done = s.query()
            m = hccl.mem_alloc((2, 500), np.float32)
            m[:] = values(r, np.float32).reshape(2, 500)
            comm.all_reduce(m, m)  # in place, in the arena
            a = array.array("i", range(10))
            ba = comm.all_reduce(a)
            return outs, done, m.copy(), ba

        for outs, done, m, ba in run_ranks(2, fn):
            self.assertTrue(done)
            for k, o in enumerate(outs):
                np.testing.assert_array_equal(o, reference(2, np.float32, hccl.SUM, seed=k))
            np.testing.assert_array_equal(m.ravel(), reference(2, np.float32, hccl.SUM))
            np.testing.assert_array_equal(ba, np.arange(10, dtype=np.int32) * 2)

    def test_errors(self):
        def fn(comm, r, n):
            caught = {}
            try:
                comm.broadcast(np.zeros(4, np.float32), root=n + 5)
            except hccl.HcclError as e:
                caught["root"] = (e.result, e.name, e.call)
            for what, call in (
                    ("noncontig", lambda: comm.broadcast(np.zeros((4, 4), np.float32)[:, 0], 0)),
                    ("readonly", lambda: comm.recv(np.zeros(4, np.float32).setflags(write=False)
                                                   or np.frombuffer(b"abcd", np.uint8), 0)),
                    ("complex", lambda: comm.all_reduce(np.zeros(4, np.complex64))),
                    ("short", lambda: comm.all_reduce(np.zeros(4, np.int32),
                                                      np.zeros(3, np.int32)))):
                try:
                    call()
                except (ValueError, TypeError) as e:
                    caught[what] = type(e).__name__
            return caught

        for caught in run_ranks(2, fn):
            self.assertEqual(caught["root"], (hccl.Result.E_PARA, "HCCL_E_PARA", "HcclBroadcast"))
            self.assertEqual(caught["noncontig"], "ValueError")
            self.assertEqual(caught["readonly"], "ValueError")
            self.assertEqual(caught["complex"], "TypeError")
            self.assertEqual(caught["short"], "ValueError")
        with self.assertRaises(hccl.HcclError) as cm:
            hccl.Comm(2, hccl.get_root_info(), 2)
        self.assertEqual(cm.exception.result, hccl.Result.E_PARA)
        with self.assertRaises(ValueError):
            hccl.RootInfo(b"short")


def registered(comm, r, n, path):
    # A 4 MiB array (malloc'd by numpy: private anonymous pages) registered, reduced in place
    # three times, then deregistered: still the same memory, still usable.
    x = np.arange(1 << 20, dtype=np.float32) * (r + 1)
    addr = x.ctypes.data
    with comm.register(x) as reg:
        self_again = comm.register(x)  # the same pages again: the same registration, counted
        for _ in range(3):
            comm.all_reduce(x, x)
        self_again.close()
        first = x[:4].tolist()
    x[0] = -1.0
    # Memory that is not private anonymous (a file's pages) is refused with HCCL_E_PARA.
    m = np.memmap(path % r, dtype=np.float32, mode="w+", shape=(1 << 16,))
    try:
        comm.register(m)
        refused = None
    except hccl.HcclError as e:
        refused = int(e.result)
    # One left registered for the comm's destroy to deregister.
    comm.register(np.ones(1 << 18, np.float32))
    return addr == x.ctypes.data, reg.handle.value, first, float(x[0]), refused


class TestCommConfig(unittest.TestCase):
    def test_layout_is_hccls(self):
        """HCCL's version 11 HcclCommConfig: each field where libclient/include/hccl/hccl.h has
        it, and HcclCommConfigInit's values."""
        want = {"hcclExecTimeOut": 316, "hcclAlgo": 320, "hcclRetryEnable": 1920,
                "hcclRetryParams": 1970, "hcclBufferName": 2098, "hcclQos": 2228,
                "hcclSymWinMaxMemSizePerRank": 2232, "hcclChannelSqDepth": 2240}
        self.assertEqual({k: getattr(hccl.CommConfig, k).offset for k in want}, want)
        cfg = hccl.CommConfig()
        self.assertEqual((cfg.size, cfg.version, cfg.hcclQos, cfg.hcclChannelSqDepth,
                          cfg.hcclSymWinMaxMemSizePerRank, cfg.hcclRetryEnable,
                          cfg.hcclRetryParams), (2248, 11, 0xFFFFFFFF, 0xFFFFFFFF, 16, b"", b""))

    def test_retry_and_qos_fields(self):
        """The op retry strings and hcclQos reach the library: bad ones fail the init with
        HCCL_E_PARA, good ones form the comm. In a rank of its own: a comm made in this
        process would fix its settings (profiling among them) for the ranks forked later."""
        def init(**fields):
            try:
                with hccl.Comm(1, hccl.get_root_info(), 0, config=fields):
                    return None
            except hccl.HcclError as e:
                return e.result

        def fn(comm, r, n):
            return [init(hcclRetryEnable="L1:1", hcclQos=6,
                         hcclRetryParams="MaxCnt:3, HoldTime:5000, IntervalTime:1000"),
                    init(hcclRetryParams="MaxCnt:3, HoldTime:5000"),
                    init(hcclRetryEnable="L1:2"), init(hcclQos=8)]

        self.assertEqual(run_ranks(1, fn)[0],
                         [None, hccl.Result.E_PARA, hccl.Result.E_PARA, hccl.Result.E_PARA])


class TestComms(unittest.TestCase):
    def test_register(self):
        tmp = tempfile.mkdtemp(prefix="hccl-reg-")
        try:
            res = run_ranks(2, registered, os.path.join(tmp, "m%d"))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        # x = (r + 1) * i summed over 2 ranks (3i), then twice more over equal inputs: 12i.
        scale = 3 * 2 * 2
        for same, handle, first, x0, refused in res:
            self.assertTrue(same)
            self.assertIsNone(handle)  # closed
            self.assertEqual(first, [i * scale for i in range(4)])
            self.assertEqual(x0, -1.0)
            self.assertEqual(refused, int(hccl.Result.E_PARA))


    def test_split_and_names(self):
        def fn(comm, r, n):
            child = comm.split(r % 2 if r < 3 else hccl.SPLIT_NOCOLOR, key=r)
            if child is None:
                return None
            with child:
                return (child.rank, child.size, child.name, comm.name,
                        child.all_reduce(np.array([r], np.int32))[0])

        res = run_ranks(4, fn)
        self.assertIsNone(res[3])
        for r in range(3):
            rank, size, name, parent, total = res[r]
            self.assertEqual((rank, size), ({0: 0, 1: 0, 2: 1}[r], {0: 2, 1: 1, 2: 2}[r]))
            self.assertEqual(name, f"{parent}_split0_c{r % 2}")
            self.assertEqual(total, {0: 2, 1: 1, 2: 2}[r])

    def test_from_env_under_hccl_run(self):
        out_dir = tempfile.mkdtemp(prefix="hccl-py-env-")
        prog = ("import os, sys, numpy as np, hccl\n"
                "c = hccl.Comm.from_env()\n"
                "s = int(c.all_reduce(np.array([c.rank + 1], np.int64))[0])\n"
                "open(os.path.join(sys.argv[1], str(c.rank)), 'w').write(f'{c.size} {s}')\n")
        env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"))
        run = os.path.join(os.path.dirname(os.environ.get(
            "HCCLD_BIN", os.path.join(TOP, "build", "bin", "hccld"))), "hccl-run")
        try:
            subprocess.run([run, "-n", "3", "--", sys.executable, "-c", prog, out_dir], env=env,
                           timeout=60, check=True)
            got = {f: open(os.path.join(out_dir, f)).read() for f in sorted(os.listdir(out_dir))}
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        self.assertEqual(got, {"0": "3 6", "1": "3 6", "2": "3 6"})

    def test_topology_under_hccl_run(self):
        """hccl-topology under hccl-run, 3 ranks on 2 daemons: which ranks share a daemon, and
        the links between the daemons with the figures the link probe measured; without the
        admin sockets it says so and prints the rest."""
        other = Daemon()
        tool = os.path.join(os.path.dirname(os.environ.get(
            "HCCLD_BIN", os.path.join(TOP, "build", "bin", "hccld"))), "hccl-topology")
        run = os.path.join(os.path.dirname(tool), "hccl-run")
        try:
            cmd = [run, "-n", "3", "--daemons", f"{ranks.DAEMON.sock},{other.sock}", "--", tool]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True)
            blind = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True,
                                   env=dict(os.environ, HCCLD_ADMIN_SOCKET="/nonexistent"))
        finally:
            other.stop()
        rows = [x.split() for x in out.stdout.splitlines() if not x.startswith("#")]
        self.assertEqual([(r[0], r[2], r[3]) for r in rows[:2]],
                         [("0", "0,1", "daemon"), ("1", "2", "daemon")], out.stdout)
        self.assertEqual([r[-1] for r in rows[:2]], [ranks.DAEMON.sock, other.sock])
        links = rows[2:]
        self.assertEqual([(r[0], r[1], r[2]) for r in links], [("0", "1", "tcp"),
                                                               ("1", "0", "tcp")], out.stdout)
        self.assertTrue(all(float(r[3]) > 0 and float(r[4]) > 0 for r in links), out.stdout)
        self.assertEqual(blind.stdout.count("(its admin socket: /nonexistent: "), 2,
                         blind.stdout)
        self.assertIn("ranks on 2 daemon(s)", blind.stdout)

    def test_across_two_daemons(self):
        other = Daemon()
        try:
            here = ranks.DAEMON.sock
            res = run_ranks(4, every_reduction, socks=[here, here, other.sock, other.sock])
        finally:
            other.stop()
        for got in res:
            for d in (np.float32, np.int64, np.float16):
                np.testing.assert_array_equal(got[(np.dtype(d).name, int(hccl.SUM))],
                                              reference(4, d, hccl.SUM))

    def test_connects_again_after_the_daemon_restarts(self):
        # In a child of its own: the test process keeps its connection to the module's daemon.
        def child(q):
            try:
                first = Daemon()
                os.environ["HCCLD_SOCKET"] = first.sock
                comm = hccl.Comm(1, hccl.get_root_info(), 0)
                first.stop()
                second = Daemon()
                os.environ["HCCLD_SOCKET"] = second.sock
                try:
                    hccl.get_root_info()
                    held = "no error"
                except hccl.HcclError as e:
                    held = int(e.result)
                comm.destroy()  # its daemon is gone; nothing holds the connection after this
                with hccl.Comm(1, hccl.get_root_info(), 0) as again:
                    q.put((held, again.all_reduce(np.array([7, 8], np.int32)).tolist()))
                second.stop()
            except BaseException as e:  # pylint: disable=broad-except
                q.put(repr(e))

        q = ranks._ctx.Queue()  # pylint: disable=protected-access
        p = ranks._ctx.Process(target=child, args=(q,))  # pylint: disable=protected-access
        p.start()
        try:
            got = q.get(timeout=60)
        finally:
            p.join(10)
            if p.is_alive():
                p.kill()
        # While a comm of the dead daemon lives the connection stays (its calls fail); then a
        # new one is made.
        self.assertEqual(got, (int(hccl.Result.E_UNAVAIL), [7, 8]))


if __name__ == "__main__":
    unittest.main()
