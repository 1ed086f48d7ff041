"""What the Python tests share: a private hccld for the test run, and ranks in forked
processes that each make a comm and return what a function of theirs computed."""
import multiprocessing
import os
import signal
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(TOP, "python"))

import hccl  # noqa: E402  (the path above first)
from hccl.daemon import Daemon  # noqa: E402,F401 (the test modules' private daemons)

_ctx = multiprocessing.get_context("fork")


def terminate(pids):
    """SIGTERM to each of pids, processes the test started (one already gone: nothing)."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


# The daemon of the test module that runs (setUpModule and tearDownModule, imported by each).
DAEMON = None


def setUpModule():  # noqa: N802 (unittest's name)
    global DAEMON
    DAEMON = Daemon()
    os.environ["HCCLD_SOCKET"] = DAEMON.sock


def tearDownModule():  # noqa: N802
    DAEMON.stop()


def _rank_main(fn, n, r, root, sock, args, q):
    try:
        if sock is not None:
            os.environ["HCCLD_SOCKET"] = sock
        with hccl.Comm(n, root, r) as comm:
            q.put((r, True, fn(comm, r, n, *args)))
    except BaseException:  # pylint: disable=broad-except
        q.put((r, False, traceback.format_exc()))


def run_ranks(n, fn, *args, socks=None, timeout=60):
    """Runs fn(comm, rank, n, *args) in n forked ranks of one job (rank r on the daemon at
    socks[r] if given); returns their results by rank. A rank that fails raises its traceback
    here; one that has not answered within timeout seconds is killed and fails the call."""
    root = hccl.get_root_info()
    q = _ctx.Queue()
    procs = [
        _ctx.Process(target=_rank_main,
                     args=(fn, n, r, root, socks[r] if socks else None, args, q))
        for r in range(n)
    ]
    for p in procs:
        p.start()
    results, deadline = {}, time.monotonic() + timeout
    try:
        while len(results) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"ranks {sorted(set(range(n)) - set(results))} hung")
            try:
                r, ok, value = q.get(timeout=min(left, 1.0))
            except Exception:  # queue.Empty
                continue
            if not ok:
                raise AssertionError(f"rank {r} failed:\n{value}")
            results[r] = value
    finally:
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()) + 1)
            if p.is_alive():
                p.kill()
                p.join()
    return [results[r] for r in range(n)]
