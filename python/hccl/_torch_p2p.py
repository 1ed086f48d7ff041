"""Point to point of hccl.torch outside batches: sends and receives matched as gloo matches them.

Sends from rank a to rank b with tag t run in issue order on a channel of their own: a comm of
two ranks (a is its rank 0) with a worker (a Lane), made on first use. So a send never waits
behind a receive, nor behind the group's collectives, nor behind another tag's: isends and
irecvs match in any order, and the sends and receives of one (peer, tag) pair match in order.
Each tag used between two ranks costs a comm of its own.

Receive from any source: every send also counts itself in the group's store at issue
(hccl/p2p/a-b/t/sent), and a rank counts the receives it has put on each channel to it. A
receive from any source (on a worker of its own: such receives resolve one at a time, in issue
order) polls the counters of every other rank's channel to it with its tag, takes the first
that holds a message no receive has claimed, and puts its receive on that channel; its work
then says which rank it was (_source_rank).
"""
import threading
import time

from . import comm as _comm
from ._torch_lane import Lane, Op
from ._torch_work import Work
from .comm import RECV, SEND, Comm, RootInfo
from .torch_tensors import Staged


class SourceWork(Work):
    """The work of a receive from any source: _source_rank() is the rank it came from."""

    def __init__(self, lane, op, source):
        super().__init__(lane, op)
        self._source = source  # a one-item list, filled once the source is known

    def _source_rank(self):
        if not self._source:
            raise RuntimeError("hccl recv from any source: its source is not known before it "
                               "completes")
        return self._source[0]


class Channels:
    """The channels of a process group pg (a ProcessGroupHCCL): its rank, store, timeout,
    comm config, its own lane (broken once aborted) and comm (which knows of a dead rank)."""

    def __init__(self, pg):
        self.pg = pg
        self.lanes = {}  # (src, dst, tag): the Lane of p2p from rank src to rank dst with tag
        self.claimed = {}  # (src, tag): receives put on the channel from src with tag
        self.lock = threading.Lock()  # claimed, with putting each receive on its channel
        self.any = None  # the Lane that resolves receives from any source
        self.start = 0  # the rank the next any-source poll looks at first

    @staticmethod
    def key(src, dst, tag):
        return f"hccl/p2p/{src}-{dst}/{tag}"

    def send(self, tensors, dst, tag):
        ch = self._channel(self.pg.rank(), dst, tag)
        # Counted before it can run: a receiver from any source learns of it from this.
        self.pg._store.add(f"{self.key(self.pg.rank(), dst, tag)}/sent", 1)
        return self._put(ch, SEND, tensors, "send")

    def recv(self, tensors, src, tag):
        with self.lock:
            self.claimed[(src, tag)] = self.claimed.get((src, tag), 0) + 1
            return self._put(self._channel(src, self.pg.rank(), tag), RECV, tensors, "recv")

    def recv_any(self, tensors, tag):
        if self.any is None:
            self.any = Lane(f"hccl-p2p-any-{self.pg.rank()}")
        source = []

        def run():
            src, work = self._claim_any(tensors, tag)
            source.append(src)
            try:
                work.wait()
            except RuntimeError as e:  # said again by this op's work, with the op's name
                raise RuntimeError(str(e).removeprefix("hccl recv: ")) from None

        op = Op(run, tensors, "recv")
        self.any.put(op)
        return SourceWork(self.any, op, source)

    def _claim_any(self, tensors, tag):
        """Waits for a message with tag to this rank that no receive has claimed, within the
        group's timeout; puts the receive on its channel: (its source, the receive's work)."""
        me, n, store = self.pg.rank(), self.pg.size(), self.pg._store
        peers = [q for q in range(n) if q != me]
        deadline, nap = time.monotonic() + self.pg.timeout.total_seconds(), 0.0005
        while True:
            for i in range(len(peers)):
                q = peers[(self.start + i) % len(peers)]
                sent = store.add(f"{self.key(q, me, tag)}/sent", 0)
                with self.lock:
                    if sent > self.claimed.get((q, tag), 0):
                        self.claimed[(q, tag)] = self.claimed.get((q, tag), 0) + 1
                        self.start = (self.start + i + 1) % len(peers)
                        return q, self._put(self._channel(q, me, tag), RECV, tensors, "recv")
            self._check_group(deadline, f"no rank sent this rank a message of tag {tag}")
            time.sleep(nap)
            nap = min(nap * 2, 0.05)

    def _check_group(self, deadline, late, who="a rank"):
        """Raises when the group was aborted, lost a rank (who, if one is awaited) or the
        deadline passed (late says what did not happen)."""
        if self.pg._lane.broken is not None:
            raise RuntimeError(self.pg._lane.broken)
        err = self.pg.comm.async_error()
        if err != 0:
            raise RuntimeError(f"{who} is gone (the group's comm failed: HcclResult {err})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{late} within {self.pg.timeout}")

    def _put(self, ch, kind, tensors, what):
        staged = [Staged(t, what) for t in tensors]
        # In the channel's comm the sender is rank 0 and the receiver rank 1.
        items = [(kind, s.array, 1 if kind == SEND else 0) for s in staged]

        def run():
            ch.comm.batch_send_recv(items)
            for s in staged:
                s.done()

        # Never inline: an isend must not hold its caller until the peer receives.
        return self.pg._submit(what, run, tensors, inline=False, lane=ch)

    def _channel(self, src, dst, tag):
        """The lane of p2p from rank src to rank dst with tag, made on first use: the sender
        puts a root info in the store and each side's worker polls a counter for the other (a
        blocking store wait would hold the store from everyone else), within the group's
        timeout and while the group's comm has all its ranks."""
        ch = self.lanes.get((src, dst, tag))
        if ch is not None:
            return ch
        ch = self.lanes[(src, dst, tag)] = Lane(f"hccl-p2p-{src}-{dst}-{tag}")
        key, sender, store = self.key(src, dst, tag), self.pg.rank() == src, self.pg._store

        def await_count(name, who):
            deadline, nap = time.monotonic() + self.pg.timeout.total_seconds(), 0.0005
            while store.add(f"{key}/{name}", 0) == 0:
                self._check_group(deadline, f"rank {who} did not come", f"rank {who}")
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
                               config=self.pg._config)
            except Exception as e:  # pylint: disable=broad-except
                ch.broken = ch.broken or f"p2p from rank {src} to rank {dst}: {e}"
                raise

        # No work for it: nobody waits on the setup; the channel's first op reports its failure.
        ch.put(Op(setup, [], "p2p setup"))
        return ch

    def _all(self):
        return list(self.lanes.values()) + ([self.any] if self.any is not None else [])

    def abort(self, why):
        for ch in self._all():
            ch.abort(why)

    def close(self):
        for ch in self._all():
            ch.close()
