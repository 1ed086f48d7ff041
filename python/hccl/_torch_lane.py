"""Lanes of hccl.torch: the ops of one comm in issue order, on its worker thread or here and now.

An op runs in exactly one of three places, always in issue order: inline in the caller's
thread (small, and the lane had nothing in flight), on the lane's worker (which waits inside
libhccl without the GIL, so the caller computes meanwhile), or in the thread that waits for its
work, when that thread gets there before the worker does and every earlier op is done (a
synchronous dist.all_reduce of a large tensor then costs no hand-off between threads).
"""
import queue
import threading

import torch

from .types import HcclError, Result


class Op:
    """One queued op: run() does it, outputs are its future's result, what names it in errors.
    claim decides who runs it (the worker or a waiter), seq is its place in the lane."""

    __slots__ = ("run", "fut", "outputs", "what", "claim", "seq")

    def __init__(self, run, outputs, what):
        self.run, self.outputs, self.what = run, outputs, what
        self.fut = torch.futures.Future()
        self.claim = threading.Lock()
        self.seq = 0


class Lane:
    """Ops in issue order on one comm (self.comm): the worker's queue, the count in flight, and
    the lock that lets one op run at a time."""

    def __init__(self, name, comm=None):
        self.comm = comm
        self.ops = queue.Queue()
        self.run_lock = threading.Lock()
        self.count_lock = threading.Lock()  # issued
        self.issued = 0  # seq of the next op issued
        self.next_seq = 0  # seq of the next op to run: every earlier one is done (run_lock)
        # Set when an op timed out or lost a peer: the comm's ranks may disagree on what ran,
        # so every later op fails at once with this reason (as NCCL's aborted comm does).
        self.broken = None
        self.worker = threading.Thread(target=self._serve, name=name, daemon=True)
        self.worker.start()

    def outcome(self, what, run):
        """Runs run() unless the lane is broken: None, or the error the op's work raises."""
        if self.broken is not None:
            return RuntimeError(f"hccl {what}: the group is unusable: {self.broken}")
        try:
            run()
            return None
        except Exception as e:  # pylint: disable=broad-except
            if self.broken is not None:  # aborted under it
                return RuntimeError(f"hccl {what}: the group is unusable: {self.broken}")
            why = f"hccl {what}: {e}"
            if isinstance(e, HcclError) and e.result in (Result.E_TIMEOUT, Result.E_REMOTE):
                self.broken = why
            return RuntimeError(why)

    def run_inline(self, what, run):
        """Runs the op here if nothing of the lane's is in flight: (True, its outcome), or
        (False, None) and the caller queues it."""
        with self.count_lock:
            if self.issued != self.next_seq:  # ops in flight
                return False, None
            # Nothing in flight: run_lock is free or about to be (an op just done lets go of
            # it). Taken here, it keeps the order.
            self.run_lock.acquire()  # pylint: disable=consider-using-with
            self.issued += 1
        try:
            return True, self.outcome(what, run)
        finally:
            self._ran()

    def put(self, op):
        with self.count_lock:
            op.seq, self.issued = self.issued, self.issued + 1
        self.ops.put(op)

    def steal(self, op):
        """Runs a queued op in the calling thread if the worker has not started it and every
        earlier op is done; True if it ran here."""
        if op.seq != self.next_seq or not self.run_lock.acquire(blocking=False):
            return False
        if op.seq != self.next_seq or not op.claim.acquire(blocking=False):
            self.run_lock.release()
            return False
        self._complete(op)
        return True

    def _complete(self, op):
        """Runs a claimed op (run_lock held) and settles its future."""
        try:
            err = self.outcome(op.what, op.run)
        finally:
            self._ran()
        if err is None:
            op.fut.set_result(op.outputs)
        else:
            op.fut.set_exception(err)

    def _ran(self):
        self.next_seq += 1
        self.run_lock.release()

    def _serve(self):
        """The worker: runs the lane's ops in order until None, skipping those a waiter ran."""
        while True:
            op = self.ops.get()
            if op is None:
                return
            self.run_lock.acquire()  # pylint: disable=consider-using-with
            if op.claim.acquire(blocking=False):
                self._complete(op)
            else:
                self.run_lock.release()
            op = None

    def abort(self, why):
        """Fails the op under way (HcclCommAbort: its call returns at once, and the peers' ops
        on the comm fail) and every later one with why; ends the worker."""
        self.broken = why
        comm, self.comm = self.comm, None
        if comm is not None:
            try:
                comm.abort()
            except HcclError:
                pass
        # Not joined: a worker may still wait where no abort reaches (a p2p comm's init).
        if self.worker is not None:
            self.ops.put(None)
            self.worker = None

    def close(self):
        """Ends the worker after the ops queued so far, then the comm."""
        if self.worker is not None:
            self.ops.put(None)
            self.worker.join()
            self.worker = None
            if self.comm is not None:
                self.comm.destroy()
