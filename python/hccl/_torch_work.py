"""Works of hccl.torch: what torch gets back for each op.

torch 1.13 traps, both avoided here: a work made by _create_work_from_future returns True from
wait() even when its future holds an error; and a Python Work whose object is collected while
C++ still holds it loses its overrides (wait() then waits forever). So each work is a Python
dist._Work held in _HELD until its op is done and someone took its outcome (wait() or
get_future()); a work neither waited on nor asked for its future stays held.
"""
import datetime
import threading

import torch
import torch.distributed as dist

_HELD = set()  # set.add and discard are atomic under the GIL


def _seconds(timeout):
    """Work.wait's timeout in seconds, or None for none (torch's default is timedelta(0))."""
    if timeout is None:
        return None
    secs = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)
    return secs if secs > 0 else None


class Work(dist._Work):  # pylint: disable=protected-access
    """A queued op's work over its future: wait() raises the op's error; it runs the op in the
    waiting thread when the lane's worker has not started it yet (Lane.steal). wait(timeout)
    raises RuntimeError once the timeout passes with the op still in flight (as gloo's does);
    the op goes on, and a later wait() takes its outcome."""

    def __init__(self, lane, op):
        super().__init__()
        self._lane, self._op, self._fut, self._taken = lane, op, op.fut, False
        self._what, self._done = op.what, threading.Event()
        _HELD.add(self)
        self._fut.add_done_callback(lambda _f: (self._done.set(), self._release()))

    def _release(self):
        if self._taken and self._fut.done():
            _HELD.discard(self)
            self._lane = self._op = None

    def wait(self, timeout=None):
        secs = _seconds(timeout)
        self._taken = True
        try:
            op = self._op
            if secs is None and op is not None and not self._fut.done():
                self._lane.steal(op)  # run here: unbounded, so only without a timeout
            if secs is not None and not self._done.wait(secs):
                raise RuntimeError(f"hccl {self._what}: not complete within the wait's timeout "
                                   f"({secs:g} s); it goes on")
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


class Done(dist._Work):  # pylint: disable=protected-access
    """The work of an op that ran inline: complete, with its outputs or its error; its future
    is made only when asked for."""

    def __init__(self, outputs, err):
        super().__init__()
        self._outputs, self._err = outputs, err
        _HELD.add(self)

    def wait(self, timeout=None):
        _HELD.discard(self)
        if self._err is not None:
            raise self._err
        return True

    def get_future(self):
        _HELD.discard(self)
        fut = torch.futures.Future()
        if self._err is None:
            fut.set_result(self._outputs)
        else:
            fut.set_exception(self._err)
        return fut

    def is_completed(self):
        return True

    def is_success(self):
        return self._err is None

    def result(self):
        if self._err is not None:
            raise self._err
        return self._outputs
