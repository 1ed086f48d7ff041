#!/usr/bin/python3
"""Hybrid parallel training (tensor x pipeline x data parallel) with torch.distributed "hccl".

What it shows: 8 ranks on 2 hccld daemons (ranks 0-3 on daemon 0, 4-7 on daemon 1: think of
them as 2 nodes of 4 devices) train a 2-stage MLP laid out TP=2 x PP=2 x DP=2 with
dist.new_group, and get the losses of a single process training the same model:
  - TP (Megatron style): in each stage a column-parallel Linear(H, 4H), ReLU, a row-parallel
    Linear(4H, H) whose partial outputs are all_reduce'd in the TP pair, plus a residual; the
    backward all_reduces the gradient of the block's input (Megatron's f and g).
  - PP: stage 0 sends its activations to stage 1 with blocking dist.send/dist.recv, stage 1
    sends the activations' gradients back (GPipe: every micro-batch forward, then every one
    backward in reverse order; both stages issue their sends and receives in the same order).
  - DP, ZeRO-1 style: each rank flattens its parameters' gradients, reduce_scatter_tensor (AVG)
    leaves each DP rank one shard of them, that rank applies SGD to its shard of the flattened
    parameters only, and all_gather_into_tensor puts the updated parameters back together
    (with plain SGD there is no optimizer state; momentum or Adam state would live in shards).
    The global batch is split across the DP ranks, then into micro-batches.
Every step's loss is checked against a reference computed in the launcher (same init, full
model, full batch, torch.optim.SGD): |loss - reference| <= RTOL x |reference| + ATOL, with
1e-5 and 1e-7 (fp32). The same model is then trained pure data parallel (DP=8, one all_reduce
of the flattened gradients per step) and checked the same way. For each layout the bytes that
crossed between the daemons are the sum over both daemons of the growth of
`hccld-ctl status --json`'s net_tx_bytes (payload sent to peer daemons) over the training steps.

Placement: a rank's digits are (pp, dp, tp), slowest to fastest (Megatron-LM's default order).
A TP pair is 2 neighbouring ranks in one daemon: TP is the busiest traffic (an all_reduce of
activations per block and micro-batch forward, another backward, with compute waiting on it).
A daemon holds one pipeline stage, both of its DP replicas and their TP pairs, so only the PP
sends cross daemons: B x H floats each way per step, whereas the DP reduce-scatter and
all-gather move about as many floats as the rank has parameters (H x 4H / 2 per layer) per step.
A second hybrid run places the ranks (dp, pp, tp), DP across daemons, to measure the difference.

Run (from a source tree after `make`; or with hccl installed and hccld, hccld-ctl on PATH):
    /usr/bin/python3 examples/hybrid_parallel.py [--steps 10] [--hidden 256] [--batch 32]
It starts 2 private daemons with hccl.daemon (HCCLD_BIN, else the source tree's
build/bin/hccld, else PATH; hccld-ctl likewise, or HCCLD_CTL) and stops them at exit; it takes
about 5 s on 2 cores. Exit status 0 when every check passes, 1 on a loss mismatch or a failed
rank.
"""
import argparse
import atexit
import json
import multiprocessing
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(HERE)
if os.path.isdir(os.path.join(TOP, "python", "hccl")):
    sys.path.insert(0, os.path.join(TOP, "python"))  # a source tree: its hccl first

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hccl.torch  # noqa: E402,F401  (registers the backend "hccl")
from hccl.daemon import Daemon, tool  # noqa: E402

WORLD, PER_DAEMON = 8, 4
TP = PP = DP = 2  # the hybrid layouts' dimensions (the code below assumes 2 each)
LR, RTOL, ATOL = 0.2, 1e-5, 1e-7
TIMEOUT = 120  # seconds any rank may wait for the others
# column, name, kind, the rank's digits (slowest first; each dimension has size 2)
LAYOUTS = [("hybrid", "TP2xPP2xDP2 (PP across daemons)", "hybrid", ("pp", "dp", "tp")),
           ("hybrid DP-x", "TP2xPP2xDP2 (DP across daemons)", "hybrid", ("dp", "pp", "tp")),
           ("pure DP", "DP8 (all_reduce)", "dp", None)]


def tx_bytes(daemon):
    """Payload bytes the daemon sent to its peer daemons so far."""
    out = subprocess.run([tool("hccld-ctl"), "--admin-socket", daemon.admin, "status", "--json"],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)["net_tx_bytes"]


# --- the model: per stage w1 (F x H), b1 (F), w2 (H x F), b2 (H) ---------------------------
def init_params(h, f):
    g = torch.Generator().manual_seed(0)

    def uniform(shape, fan_in):
        return (torch.rand(shape, generator=g) * 2 - 1) * fan_in ** -0.5

    return [[uniform((f, h), h), uniform((f,), h), uniform((h, f), f), uniform((h,), f)]
            for _ in range(2)]


def data(batch, h):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, h, generator=g)
    return x, torch.tanh(x @ torch.randn(h, h, generator=g) * h ** -0.5)


def block(x, w1, b1, w2, b2):
    return x + F.linear(F.relu(F.linear(x, w1, b1)), w2, b2)


class CopyToTP(torch.autograd.Function):
    """Megatron's f: identity forward; backward, all_reduce of the input's gradient."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class ReduceFromTP(torch.autograd.Function):
    """Megatron's g: all_reduce of the partial outputs forward; identity backward."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def tp_block(x, tp_group, w1, b1, w2, b2):
    """block() with w1, b1 split by rows (column-parallel) and w2 by columns (row-parallel)."""
    partial = F.linear(F.relu(F.linear(CopyToTP.apply(x, tp_group), w1, b1)), w2)
    return x + ReduceFromTP.apply(partial, tp_group) + b2


def tp_shard(stage, tp):
    w1, b1, w2, b2 = stage
    half = w1.shape[0] // TP
    part = slice(tp * half, (tp + 1) * half)
    return [t.clone().requires_grad_() for t in (w1[part], b1[part], w2[:, part], b2)]


def flat(tensors, multiple):
    v = torch.cat([t.reshape(-1) for t in tensors])
    return F.pad(v, (0, -len(v) % multiple))


def unflatten_into(v, params):
    at = 0
    with torch.no_grad():
        for p in params:
            p.copy_(v[at:at + p.numel()].view_as(p))
            at += p.numel()


# --- one rank ----------------------------------------------------------------------------
def coords(rank, order):
    return {d: (rank >> i) & 1 for i, d in enumerate(reversed(order))}


def rank_of(c, order):
    return sum(c[d] << i for i, d in enumerate(reversed(order)))


def make_groups(rank, order):
    """Every rank creates every group, in the same order; it keeps its own TP, PP, DP groups."""
    mine = {}
    for dim in ("tp", "pp", "dp"):
        for r in range(WORLD):
            c = coords(r, order)
            if c[dim] == 0:
                ranks = [r, rank_of(dict(c, **{dim: 1}), order)]
                assert dim != "tp" or ranks[0] // PER_DAEMON == ranks[1] // PER_DAEMON
                group = dist.new_group(ranks)
                if rank in ranks:
                    mine[dim] = (group, ranks)
    return mine


def train_hybrid(rank, args, order):
    c, groups = coords(rank, order), make_groups(rank, order)
    tp_group, (pp_group, pp_ranks), (dp_group, _) = groups["tp"][0], groups["pp"], groups["dp"]
    tp, pp, dp = c["tp"], c["pp"], c["dp"]
    peer = pp_ranks[1 - pp]
    params = tp_shard(init_params(args.hidden, 4 * args.hidden)[pp], tp)
    x, y = data(args.batch, args.hidden)
    rows = args.batch // DP
    mb = rows // args.micro
    starts = [dp * rows + m * mb for m in range(args.micro)]

    def train_step():
        for p in params:
            p.grad = None
        kept, loss_sum = [], 0.0
        for lo in starts:  # forward, every micro-batch
            if pp == 0:
                out = tp_block(x[lo:lo + mb], tp_group, *params)
                dist.send(out.detach(), peer, group=pp_group)
                kept.append(out)
            else:
                inp = torch.empty(mb, args.hidden)
                dist.recv(inp, peer, group=pp_group)
                inp.requires_grad_()
                loss = F.mse_loss(tp_block(inp, tp_group, *params), y[lo:lo + mb]) / args.micro
                kept.append((inp, loss))
                loss_sum += loss.item()
        for k in reversed(kept):  # backward, in reverse order
            if pp == 0:
                grad = torch.empty(mb, args.hidden)
                dist.recv(grad, peer, group=pp_group)
                k.backward(grad)
            else:
                k[1].backward()
                dist.send(k[0].grad, peer, group=pp_group)
        # ZeRO-1: reduce-scatter the gradients, SGD on my shard, all-gather the parameters.
        grads = flat([p.grad for p in params], DP)
        shard = torch.empty(len(grads) // DP)
        dist.reduce_scatter_tensor(shard, grads, op=dist.ReduceOp.AVG, group=dp_group)
        full = flat([p.detach() for p in params], DP)
        mine = full[dp * len(shard):(dp + 1) * len(shard)].add(shard, alpha=-LR)
        dist.all_gather_into_tensor(full, mine, group=dp_group)
        unflatten_into(full, params)
        return loss_sum

    # The loss of a micro-batch is known on the last stage (both TP ranks): report it once.
    return train_step, pp == 1 and tp == 0


def train_dp(rank, args, _order):
    params = [t.clone().requires_grad_() for s in init_params(args.hidden, 4 * args.hidden)
              for t in s]
    x, y = data(args.batch, args.hidden)
    rows = args.batch // WORLD
    mb = rows // args.micro

    def train_step():
        for p in params:
            p.grad = None
        loss_sum = 0.0
        for lo in range(rank * rows, (rank + 1) * rows, mb):
            loss = F.mse_loss(block(block(x[lo:lo + mb], *params[:4]), *params[4:]),
                              y[lo:lo + mb]) / args.micro
            loss.backward()
            loss_sum += loss.item()
        grads = flat([p.grad for p in params], 1)
        dist.all_reduce(grads, op=dist.ReduceOp.AVG)
        with torch.no_grad():
            for p, g in zip(params, torch.split(grads, [p.numel() for p in params])):
                p.add_(g.view_as(p), alpha=-LR)
        return loss_sum

    return train_step, True


def rank_main(kind, order, rank, port, sock, args, bar, q):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                          WORLD_SIZE=str(WORLD), HCCLD_SOCKET=sock)
        torch.set_num_threads(1)
        dist.init_process_group("hccl")
        step, reports = (train_hybrid if kind == "hybrid" else train_dp)(rank, args, order)
        bar.wait(TIMEOUT)  # all set up: the launcher reads the daemons' counters
        bar.wait(TIMEOUT)
        losses = [step() for _ in range(args.steps)]
        bar.wait(TIMEOUT)  # all done: the launcher reads them again
        bar.wait(TIMEOUT)
        q.put((rank, None, losses if reports else None))
        dist.destroy_process_group()
    except BaseException:  # pylint: disable=broad-except
        q.put((rank, traceback.format_exc(), None))
        bar.abort()


# --- the launcher ------------------------------------------------------------------------
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_layout(kind, order, daemons, args):
    """Trains in 8 forked ranks; returns (mean loss per step, bytes crossed between daemons)."""
    ctx = multiprocessing.get_context("fork")
    bar, q, port = ctx.Barrier(WORLD + 1), ctx.Queue(), free_port()
    procs = [ctx.Process(target=rank_main, args=(kind, order, r, port,
                                                 daemons[r // PER_DAEMON].sock, args, bar, q))
             for r in range(WORLD)]
    for p in procs:
        p.start()
    try:
        bar.wait(TIMEOUT)
        before = sum(tx_bytes(d) for d in daemons)
        bar.wait(TIMEOUT)
        bar.wait(TIMEOUT)
        crossed = sum(tx_bytes(d) for d in daemons) - before
        bar.wait(TIMEOUT)
        results = [q.get(timeout=TIMEOUT) for _ in range(WORLD)]
    except BaseException as e:
        bar.abort()  # nobody waits for us any more
        if not isinstance(e, (threading.BrokenBarrierError, queue.Empty)):
            raise
        results, deadline = [], time.monotonic() + 10  # what the others say within 10 s
        while len(results) < WORLD and time.monotonic() < deadline:
            try:
                results.append(q.get(timeout=0.2))
            except queue.Empty:
                if not any(p.is_alive() for p in procs):
                    break
    finally:
        deadline = time.monotonic() + 10
        for p in procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join()
    failed = [(r, e) for r, e, _ in results if e]  # in the order they failed
    if failed or len(results) < WORLD:
        lines = [f"rank {r}: {e.strip().splitlines()[-1]}" for r, e in failed]
        first = f"\nthe first to fail, rank {failed[0][0]}:\n{failed[0][1]}" if failed else ""
        raise SystemExit(f"{kind} {order}: ranks failed or hung\n" + "\n".join(lines) + first)
    per_rank = [losses for _, _, losses in results if losses is not None]
    return [sum(s) / len(per_rank) for s in zip(*per_rank)], crossed


def reference(args):
    params = [t.clone().requires_grad_() for s in init_params(args.hidden, 4 * args.hidden)
              for t in s]
    x, y = data(args.batch, args.hidden)
    opt = torch.optim.SGD(params, lr=LR)
    losses = []
    for _ in range(args.steps):
        opt.zero_grad()
        loss = F.mse_loss(block(block(x, *params[:4]), *params[4:]), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--steps", type=int, default=10, help="SGD steps (default 10)")
    ap.add_argument("--hidden", type=int, default=256,
                    help="H, the model's width; the TP layers are H -> 4H -> H (default 256)")
    ap.add_argument("--batch", type=int, default=32,
                    help="global batch, a multiple of 8 x --micro (default 32)")
    ap.add_argument("--micro", type=int, default=2,
                    help="micro-batches per step and DP rank (default 2)")
    args = ap.parse_args()
    if args.batch % (WORLD * args.micro) or min(args.batch, args.hidden, args.steps) < 1:
        ap.error("--batch must be a multiple of 8 x --micro; --hidden and --steps at least 1")
    torch.set_num_threads(1)

    daemons = []

    def cleanup():
        for d in daemons:
            d.stop()

    atexit.register(cleanup)
    daemons += [Daemon(), Daemon()]
    t0 = time.monotonic()
    runs = [(name, *run_layout(kind, order, daemons, args)) for _, name, kind, order in LAYOUTS]
    ref = reference(args)

    ok = True
    print(f"{'step':>4} " + " ".join(f"{c[0]:>13}" for c in LAYOUTS) + f" {'reference':>13}"
          f" {'max |diff|':>11}")
    for s, r in enumerate(ref):
        got = [losses[s] for _, losses, _ in runs]
        ok &= all(abs(g - r) <= RTOL * abs(r) + ATOL for g in got)
        print(f"{s:>4} " + " ".join(f"{v:13.8f}" for v in got + [r])
              + f" {max(abs(g - r) for g in got):11.3e}")
    print(f"check: |loss - reference| <= {RTOL:g} x |reference| + {ATOL:g} on every step: "
          f"{'ok' if ok else 'FAILED'}\n")

    print(f"{'layout':<32} {'bytes crossed between daemons':>30} {'steps':>5} {'final loss':>11}")
    for name, losses, crossed in runs:
        print(f"{name:<32} {crossed:>30,} {args.steps:>5} {losses[-1]:11.8f}")
    pp_bytes = args.steps * 2 * TP * args.batch * args.hidden * 4
    print(f"(the PP sends alone: {args.steps} steps x 2 directions x 2 TP ranks x {args.batch}"
          f" x {args.hidden} fp32 = {pp_bytes:,} bytes)")
    print(f"({len(runs)} layouts trained in {time.monotonic() - t0:.1f} s)\n")
    ranked = sorted(runs, key=lambda run: run[2])
    (best, _, least), rest = ranked[0], ranked[1:]
    print(("Every layout matched the single-process reference on every step" if ok else
           "MISMATCH: some layout's losses differ from the reference (see the table)")
          + f"; {best} crossed the fewest bytes between daemons ({least:,}"
          + (": the PP sends alone), " if least == pp_bytes else "), ")
          + " and ".join(f"{n / max(least, 1):.0f}x fewer than {name}" for name, _, n in rest)
          + ".")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
