"""hccld-ctl watch: every kind of event provoked on private daemons and seen in the stream, each
within 1 s of its cause by the daemon's own clock (the time it stamps on the event; arrival
waits are bounded at 15 s so that a loaded machine fails nothing that works), in JSON Lines and
in text; the stream survives a reload (SIGHUP) and a restart of the daemon (the tool connects
again), a bad --stall-s is a usage error, and a watcher that stops reading is dropped rather than
buffered for."""
import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import numpy as np

import ranks
from ranks import Daemon, hccl, run_ranks  # noqa: F401

CTL = hccl.daemon.tool("hccld-ctl")
WAIT_S = 15  # how long a test waits for an event to arrive at all
WITHIN_S = 1.0  # how long after its cause the daemon must have emitted it


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Watch:
    """hccld-ctl watch on a daemon's admin socket, its lines read by a thread."""

    def __init__(self, admin, *args, json_lines=True):
        self.json = json_lines
        cmd = [CTL, "--admin-socket", admin, "watch", *(["--json"] if json_lines else []), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.lines = queue.Queue()
        self.seen = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(json.loads(line) if self.json else line.rstrip("\n"))

    def expect(self, match, what):
        """The first event (from now on) that match() accepts; fails after WAIT_S."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                e = self.lines.get(timeout=0.2)
            except queue.Empty:
                continue
            self.seen.append(e)
            if match(e):
                return e
        raise AssertionError(f"no {what} event within {WAIT_S} s; saw {self.seen[-20:]}")

    def kind(self, kind, **fields):
        return self.expect(lambda e: e["kind"] == kind and
                           all(e.get(k) == v for k, v in fields.items()), kind)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)
        return self.proc.stderr.read()


def soon(test, e, t0):
    """The daemon emitted e within WITHIN_S of t0 (wall clock, seconds)."""
    late = e["time_ms"] / 1e3 - t0
    test.assertLessEqual(late, WITHIN_S, e)
    test.assertGreaterEqual(late, -0.05, e)  # not before its cause


def connect_and_leave(sock, q):
    os.environ["HCCLD_SOCKET"] = sock
    hccl.get_root_info()  # connects
    q.put(os.getpid())
    time.sleep(0.3)


def wait_then_post(comm, r, n, delay_s, count=4):
    if r == 1:
        time.sleep(delay_s)
    posted = time.time()
    y = comm.all_reduce(np.arange(count, dtype=np.float32) + r)
    np.testing.assert_array_equal(y, 2 * np.arange(count, dtype=np.float32) + 1)
    return posted


def dies_mid_op(sock, root, r, q):
    os.environ["HCCLD_SOCKET"] = sock
    comm = hccl.Comm(2, root, r)
    comm.all_reduce(np.ones(4, np.float32))  # formed and working
    q.put(("ready", r, os.getpid()))
    if r == 1:
        time.sleep(0.5)
        q.put(("dying", r, time.time()))
        q.close()
        q.join_thread()  # the message is out before the process ends
        os._exit(0)  # without HcclCommDestroy
    try:
        comm.all_reduce(np.ones(4, np.float32))
        q.put(("result", r, "no error"))
    except hccl.HcclError as e:
        q.put(("result", r, int(e.result)))


def holds_comm(sock, root, r, q, go):
    """Forms a comm of 2 (rank r on sock), runs one allreduce through the daemons (too large for
    lanes) and says so; once go is set, rank 0 runs another and says how it ended."""
    os.environ["HCCLD_SOCKET"] = sock
    comm = hccl.Comm(2, root, r)
    comm.all_reduce(np.ones(1 << 16, np.float32))
    q.put(("ready", r))
    go.wait(2 * WAIT_S)
    if r == 0:
        try:
            comm.all_reduce(np.ones(1 << 16, np.float32))
            q.put(("result", "no error"))
        except hccl.HcclError as e:
            q.put(("result", int(e.result)))
    q.close()
    q.join_thread()  # the message is out before the process ends
    os._exit(0)  # its peer may be gone: no HcclCommDestroy


def reset_between(pid_a, pid_b):
    """Resets (ss -K) every TCP connection between the daemons of pids pid_a and pid_b on
    127.0.0.1, both ends, and says how many ends went."""
    out = subprocess.run(["ss", "-H", "-t", "-n", "-p", "state", "established"], check=True,
                         capture_output=True, text=True, timeout=10).stdout
    ends = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 5 and f[2].startswith("127.0.0.1:") and f[3].startswith("127.0.0.1:"):
            ends[f[2]] = (f[3], line)
    ports = [local.rsplit(":", 1)[1] for local, (peer, line) in ends.items()
             if f"pid={pid_a}," in line and peer in ends and f"pid={pid_b}," in ends[peer][1]]
    if not ports:
        return 0
    done = subprocess.run(["ss", "-K", "-H", "-t", "-n", "src", "127.0.0.1", "and", "dst",
                           "127.0.0.1", "and", "( " + " or ".join(
                               f"sport = :{p} or dport = :{p}" for p in ports) + " )"],
                          check=True, capture_output=True, text=True, timeout=10)
    return len(done.stdout.splitlines())


def holds_retried_comm(sock, root, r, q, go):
    """Forms a comm of 2 with op retry on (rank r on sock), runs one allreduce through the
    daemons and says so; once go is set, runs another and says what it got."""
    os.environ["HCCLD_SOCKET"] = sock
    os.environ["HCCL_OP_RETRY_ENABLE"] = "L1:1"
    comm = hccl.Comm(2, root, r)
    x = np.arange(1 << 16, dtype=np.float32) * (r + 1)
    comm.all_reduce(x)
    q.put(("ready", r))
    go.wait(2 * WAIT_S)
    try:
        y = comm.all_reduce(x)
        q.put(("result", r, bool(np.array_equal(y, np.arange(1 << 16, dtype=np.float32) * 3))))
    except hccl.HcclError as e:
        q.put(("result", r, int(e.result)))
    comm.destroy()


class TestWatch(unittest.TestCase):
    def setUp(self):
        self.daemon = Daemon()
        os.environ["HCCLD_SOCKET"] = self.daemon.sock
        self.watch = Watch(self.daemon.admin, "--stall-s", "1")
        first = self.watch.kind("watching")
        self.assertIn("watching hccld", first["text"])

    def tearDown(self):
        self.watch.stop()
        self.daemon.stop()

    def test_clients_comms_stalls(self):
        q = ranks._ctx.Queue()  # pylint: disable=protected-access
        t0 = time.time()
        p = ranks._ctx.Process(target=connect_and_leave, args=(self.daemon.sock, q))  # noqa
        p.start()
        pid = q.get(timeout=WAIT_S)
        soon(self, self.watch.kind("client_connected", pid=pid), t0)
        p.join(WAIT_S)
        left = time.time()
        e = self.watch.kind("client_left", pid=pid)
        self.assertLessEqual(e["time_ms"] / 1e3 - left, WITHIN_S)

        # Rank 1 posts its allreduce 2.5 s after rank 0: at 1 s the stream names rank 1.
        t0 = time.time()
        posted = run_ranks(2, wait_then_post, 2.5)
        formed = self.watch.kind("comm_formed")
        soon(self, formed, t0)
        stall = self.watch.kind("op_stalled", comm=formed["comm"])
        self.assertEqual(stall["ranks"], [1])
        self.assertGreaterEqual(stall["waited_s"], 1.0)
        soon(self, stall, posted[0] + 1.0)
        self.assertLess(stall["time_ms"] / 1e3, posted[1])  # before rank 1 came

    def test_rank_dies_and_comm_breaks(self):
        q = ranks._ctx.Queue()  # pylint: disable=protected-access
        root = hccl.get_root_info()
        procs = [ranks._ctx.Process(target=dies_mid_op,  # pylint: disable=protected-access
                                    args=(self.daemon.sock, root, r, q)) for r in range(2)]
        for p in procs:
            p.start()
        got = {}
        while len(got) < 4:
            kind, r, v = q.get(timeout=WAIT_S)
            got[(kind, r)] = v
        for p in procs:
            p.join(WAIT_S)
        died = self.watch.kind("rank_died", ranks=[1])
        soon(self, died, got[("dying", 1)])
        self.assertEqual(died["pid"], got[("ready", 1)])
        broken = self.watch.kind("comm_broken", comm=died["comm"])
        soon(self, broken, got[("dying", 1)])
        self.assertEqual(broken["result"], int(hccl.Result.E_REMOTE))
        self.assertEqual(got[("result", 0)], int(hccl.Result.E_REMOTE))

    def test_qos_reload_and_restart(self):
        t0 = time.time()
        subprocess.run([CTL, "--admin-socket", self.daemon.admin, "qos", "set", "LOW",
                        "--max-bw", "1Gbit"], check=True, capture_output=True)
        e = self.watch.kind("qos_changed")
        soon(self, e, t0)
        self.assertIn("qos set LOW", e["text"])
        t0 = time.time()
        self.daemon.proc.send_signal(signal.SIGHUP)
        soon(self, self.watch.kind("reloaded"), t0)
        # The same stream goes on after the reload.
        t0 = time.time()
        subprocess.run([CTL, "--admin-socket", self.daemon.admin, "qos", "set", "LOW",
                        "--max-bw", "none"], check=True, capture_output=True)
        soon(self, self.watch.kind("qos_changed"), t0)
        # A restart on the same sockets: the tool connects again by itself.
        self.daemon.proc.terminate()
        self.daemon.proc.wait(10)
        self.daemon = Daemon(dir=self.daemon.dir)
        self.watch.kind("watching")
        self.assertIn("reconnecting", self.watch.stop())
        self.watch = Watch(self.daemon.admin)  # for tearDown

    def test_text_lines_and_usage(self):
        text = Watch(self.daemon.admin, json_lines=False)
        try:
            line = text.expect(lambda s: " watching " in s, "watching line")
            self.assertRegex(line, r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} watching +watching "
                                   r"hccld ")
        finally:
            text.stop()
        for bad in ("0", "-1", "x", "1e9"):
            r = subprocess.run([CTL, "--admin-socket", self.daemon.admin, "watch", "--stall-s",
                                bad], capture_output=True, text=True, timeout=10)
            self.assertEqual(r.returncode, 2, bad)
            self.assertIn("--stall-s wants seconds", r.stderr)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


class TestSlowWatcher(unittest.TestCase):
    """A watcher that stops reading is dropped once 1 MiB of events waits for it
    (EVENTS_QUEUE_MAX): the daemon says so, its memory stays bounded, and the other watchers
    and clients go on being served."""

    def test_dropped_not_buffered(self):
        tmp = tempfile.mkdtemp(prefix="hccld-watch-")
        self.addCleanup(shutil.rmtree, tmp, True)
        log = open(os.path.join(tmp, "hccld.log"), "w+")
        d = Daemon(log_level="warn", stderr=log)
        good = Watch(d.admin)
        # Its stdout is a pipe nobody reads: once the pipe is full the tool blocks on it and
        # stops reading the daemon's socket.
        slow = subprocess.Popen([CTL, "--admin-socket", d.admin, "watch", "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            good.kind("watching")
            rss0 = rss_kib(d.proc.pid)
            # Each SIGHUP reloads the QoS policy and emits a "reloaded" event of ~100 bytes.
            deadline = time.monotonic() + 120
            dropped = False
            while not dropped and time.monotonic() < deadline:
                for _ in range(200):
                    d.proc.send_signal(signal.SIGHUP)
                    time.sleep(0.0005)
                log.seek(0)
                dropped = f"hccld-ctl watch (pid {slow.pid}) reads too slowly" in log.read()
            self.assertTrue(dropped, "the slow watcher was never dropped")
            self.assertIsNone(d.proc.poll())
            self.assertLess(rss_kib(d.proc.pid) - rss0, 16 << 10)  # what one watcher may hold
            # The other watcher still gets new events, and the daemon still answers.
            while not good.lines.empty():
                good.lines.get()
            t0 = time.time()
            subprocess.run([CTL, "--admin-socket", d.admin, "qos", "set", "LOW", "--max-bw",
                            "1Gbit"], check=True, capture_output=True, timeout=10)
            soon(self, good.kind("qos_changed"), t0)
            st = subprocess.run([CTL, "--admin-socket", d.admin, "status", "--json"],
                                check=True, capture_output=True, text=True, timeout=10)
            self.assertIn("clients", json.loads(st.stdout))
        finally:
            slow.kill()
            slow.wait(10)
            good.stop()
            d.stop()
            log.close()


class TestWatchPeers(unittest.TestCase):
    @staticmethod
    def end_all(procs, watch, *daemons):
        """Kills the rank processes still alive, stops the watch, then the daemons."""
        for p in procs:
            if p.is_alive():
                p.kill()
        watch.stop()
        for d in daemons:
            d.stop()

    def ranks_ready(self, target, socks):
        """Starts rank r of a comm on socks[r] in a process running target(sock, root, r, q,
        go), and waits until each says it is ready: (q, go, the processes)."""
        q = ranks._ctx.Queue()  # pylint: disable=protected-access
        go = ranks._ctx.Event()  # pylint: disable=protected-access
        root = hccl.get_root_info()
        procs = [ranks._ctx.Process(target=target,  # pylint: disable=protected-access
                                    args=(sock, root, r, q, go))
                 for r, sock in enumerate(socks)]
        for p in procs:
            p.start()
        self.assertEqual(sorted(q.get(timeout=WAIT_S) for _ in procs),
                         [("ready", r) for r in range(len(socks))])
        return q, go, procs

    def test_peer_lost_and_back(self):
        """A comm across daemons a and b forms (comm_formed) and ends: no peer event (its control
        connection closes once the membership is out, which is no loss). Then b is killed while
        a comm with it lives: the next op on a fails with HCCL_E_REMOTE, and a's stream says
        peer_lost (its data connection failed), naming b by the address b advertises, within
        1 s, though a's link monitor samples only every minute: the broken comm makes it look at
        once. b started again on that address and a new comm: a says peer_back."""
        port = free_port()
        os.environ["HCCLD_LINK_CHECK_MS"] = "60000"  # no sample of its own during the test
        try:
            a = Daemon()
        finally:
            del os.environ["HCCLD_LINK_CHECK_MS"]
        b = Daemon(listen=f"127.0.0.1:{port}")
        watch = Watch(a.admin)
        procs = []
        try:
            watch.kind("watching")
            os.environ["HCCLD_SOCKET"] = a.sock

            def fn(comm, r, n):
                return float(comm.all_reduce(np.ones(1 << 16, np.float32))[0])

            self.assertEqual(run_ranks(2, fn, socks=[a.sock, b.sock]), [2.0, 2.0])
            formed = watch.kind("comm_formed")
            self.assertIn("2 ranks (1 here) on 2 daemons", formed["text"])
            q, go, procs = self.ranks_ready(holds_comm, [a.sock, b.sock])
            b.proc.kill()
            b.proc.wait(10)
            t0 = time.time()
            go.set()  # rank 0's next op finds b gone
            self.assertEqual(q.get(timeout=WAIT_S), ("result", int(hccl.Result.E_REMOTE)))
            lost = watch.kind("peer_lost")
            soon(self, lost, t0)
            self.assertEqual(lost["peer"], f"127.0.0.1:{port}", lost)
            self.assertEqual(lost["reason"], "a data connection to it failed", lost)
            for p in procs:
                p.join(WAIT_S)
            b = Daemon(listen=f"127.0.0.1:{port}", dir=b.dir)
            t0 = time.time()
            self.assertEqual(run_ranks(2, fn, socks=[a.sock, b.sock]), [2.0, 2.0])
            back = watch.kind("peer_back", peer=f"127.0.0.1:{port}")
            self.assertGreaterEqual(back["time_ms"] / 1e3, t0 - 0.05)
        finally:
            self.end_all(procs, watch, b, a)

    def test_link_suspended_and_resumed(self):
        """Op retry: the data connection between daemons a and b is reset (ss -K) while b is
        stopped (SIGSTOP), so it stays suspended until b runs again 1.5 s later. a's stream says
        link_suspended (its link monitor samples every 0.2 s), then link_resumed naming the
        comm, and the allreduce the ranks posted meanwhile completes with the right result."""
        os.environ["HCCLD_LINK_CHECK_MS"] = "200"
        try:
            a = Daemon()
            b = Daemon()
        finally:
            del os.environ["HCCLD_LINK_CHECK_MS"]
        watch = Watch(a.admin)
        procs = []
        try:
            watch.kind("watching")
            os.environ["HCCLD_SOCKET"] = a.sock
            q, go, procs = self.ranks_ready(holds_retried_comm, [a.sock, b.sock])
            comm = watch.kind("comm_formed")["comm"]
            b.proc.send_signal(signal.SIGSTOP)
            try:
                self.assertGreater(reset_between(a.proc.pid, b.proc.pid), 0)
                go.set()
                suspended = watch.kind("link_suspended")
                self.assertIn(f"comm {comm}", suspended["text"])
                time.sleep(1.5)
            finally:
                b.proc.send_signal(signal.SIGCONT)
            resumed = watch.kind("link_resumed")
            self.assertIn(f"comm {comm}", resumed["text"])
            self.assertEqual(sorted(q.get(timeout=WAIT_S) for _ in procs),
                             [("result", 0, True), ("result", 1, True)])
            for p in procs:
                p.join(WAIT_S)
                self.assertEqual(p.exitcode, 0)
        finally:
            self.end_all(procs, watch, b, a)

    def test_stall_names_the_late_daemon(self):
        """Every rank on daemon a posted; the op waits on daemon b, whose rank 1 posts 4 s late:
        at 1 s a's stream names b (by the address it advertises), its rank, and that b has not
        started the op; `hccld-ctl status` on a says the same while it waits."""
        port = free_port()
        a = Daemon()
        b = Daemon(listen=f"127.0.0.1:{port}")
        watch = Watch(a.admin, "--stall-s", "1")
        waits = (f"round 1 of 2 across daemons waits on the daemon of rank 1 at 127.0.0.1:{port}, "
                 "which has not started it")
        try:
            watch.kind("watching")
            os.environ["HCCLD_SOCKET"] = a.sock
            got = {}
            # 256 KiB: through the daemons, not over lanes (HCCLD_DIRECT_MAX, 64 KiB).
            t = threading.Thread(target=lambda: got.update(posted=run_ranks(
                2, wait_then_post, 4.0, 1 << 16, socks=[a.sock, b.sock])))
            t.start()
            stall = watch.kind("op_stalled")
            out = subprocess.run([CTL, "--admin-socket", a.admin, "--json", "status"],
                                 check=True, capture_output=True, text=True).stdout
            t.join(WAIT_S)
            posted = got["posted"]
            self.assertEqual(stall["ranks"], [1], stall)
            self.assertEqual(stall["peer"], f"127.0.0.1:{port}", stall)
            self.assertIn("with every rank here posted; its " + waits, stall["text"])
            self.assertGreaterEqual(stall["waited_s"], 1.0)
            soon(self, stall, posted[0] + 1.0)
            self.assertLess(stall["time_ms"] / 1e3, posted[1])  # before rank 1 came
            comm = [c for c in json.loads(out)["comms"] if c["nnodes"] == 2]
            self.assertEqual(len(comm), 1, out)
            self.assertTrue(comm[0]["on_wire"], out)
            self.assertEqual(comm[0]["waiting_on"], waits)
        finally:
            watch.stop()
            b.stop()
            a.stop()

    def test_stall_names_every_daemon_waited_on(self):
        """Fullmesh on 3 daemons, ranks 1 and 2 (one on each of b and c) 4 s late: a's status
        names both daemons, the one before it in the ring (c, whose operation check has not
        come) first, with their ranks."""
        ports = [free_port(), free_port()]
        a = Daemon()
        b, c = (Daemon(listen=f"127.0.0.1:{p}") for p in ports)
        watch = Watch(a.admin, "--stall-s", "1")
        os.environ["HCCL_ALGO"] = "level0:NA;level1:fullmesh"  # no lanes either
        try:
            watch.kind("watching")
            os.environ["HCCLD_SOCKET"] = a.sock
            got = {}

            def late(comm, r, n):
                if r > 0:
                    time.sleep(4.0)
                x = np.arange(1 << 16, dtype=np.float32)
                y = comm.all_reduce(x + r)
                np.testing.assert_array_equal(y, 3 * x + 3)
                return time.time()

            t = threading.Thread(target=lambda: got.update(posted=run_ranks(
                3, late, socks=[a.sock, b.sock, c.sock])))
            t.start()
            stall = watch.kind("op_stalled")
            t.join(WAIT_S)
            self.assertEqual(len(got["posted"]), 3)
            self.assertEqual(stall["ranks"], [2, 1], stall)
            self.assertEqual(stall["peer"], f"127.0.0.1:{ports[1]}", stall)
            self.assertIn(f"waits on the daemon of rank 2 at 127.0.0.1:{ports[1]}, which has not "
                          f"started it, and the daemon of rank 1 at 127.0.0.1:{ports[0]}",
                          stall["text"])
        finally:
            del os.environ["HCCL_ALGO"]
            watch.stop()
            for d in (c, b, a):
                d.stop()


if __name__ == "__main__":
    unittest.main()
