#!/usr/bin/env python3
"""DDP over hcclD: how much of the gradient allreduce DistributedDataParallel hides behind
backward, on a simulated cluster of one machine.

It builds "nodes": network namespaces, each with a veth to a bridge (10.215.0.K/24, addresses
that exist only inside them) and a `tc tbf` rate limit (--rate, default 10gbit) on both ends of
every veth, and runs one hccld per namespace. One training rank per node runs in the root
namespace and reaches its node's daemon by its Unix socket (HCCLD_SOCKET); the torch store is
env:// on 127.0.0.1. The model is a residual MLP of 48 Linear(1024, 1024) layers (50 M
parameters, fixed seed), trained with SGD. Variants (2 nodes unless said):
  (a) forward, backward, then one all_reduce of all gradients flattened into one tensor;
  (b) DistributedDataParallel (backend "hccl"), whose bucket allreduces overlap backward, for
      several bucket_cap_mb;
  (c) the fastest (b) on 4 nodes with HCCL_ALGORITHM=RING and =MESH, against (a) on 4 nodes.
One job per node count runs all its variants in the same rank processes, each its own model
(and, for (c), its own process group, formed with HCCL_ALGORITHM set), their steps taken in
turn, so that load from elsewhere on the machine falls on all of them alike. Each variant
also times the same forward+backward+SGD step with no communication (compute-only, next to
each real step). hcclD's per-op profile (HCCL_PROF_ENABLE=1) gives the start of every
allreduce, set against backward's start and end for one step of the fastest (b). At the end
the parameters of all ranks of every variant must be equal, and (b)/(c) must match (a) within
a tolerance: otherwise the exit status is 1.

Needs root (network namespaces, veths, tc) and the built tree (make). Run from anywhere:

    sudo /usr/bin/python3 examples/ddp_overlap.py              # default: 3-5 min on 2 cores
    sudo /usr/bin/python3 examples/ddp_overlap.py --steps 2 --buckets 5,25 --big-nodes 0
    sudo /usr/bin/python3 examples/ddp_overlap.py --rate 1gbit --big-nodes 0  # network-bound

Namespaces, bridge, daemons and the temporary directory are removed at exit, also on Ctrl-C.
"""
import argparse
import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
HCCLD = os.path.join(TOP, "build", "bin", "hccld")
SUBNET = "10.215.0"
NS = f"hdo{os.getpid()}"  # namespace names: this run's own
TOL = {"rtol": 1e-4, "atol": 1e-6}  # (b)/(c) against (a): other summation orders
RANK_TOL = {"rtol": 1e-6, "atol": 1e-8}  # the ranks of one variant among themselves


def mono_us():
    return time.clock_gettime(time.CLOCK_MONOTONIC) * 1e6


# ---- the rank: one training process ------------------------------------------------------

def worker(cfg_path):
    """One rank of one job: trains every variant, writes its timings (JSON) and each variant's
    parameters (.npy)."""
    with open(cfg_path) as f:
        cfg = json.load(f)
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import hccl.torch  # noqa: F401  (registers the backend "hccl")

    class Net(torch.nn.Module):
        """x + relu(Linear(x)) / sqrt(depth), depth times: stable at this depth."""

        def __init__(self, width, depth):
            super().__init__()
            self.scale = depth ** -0.5
            self.layers = torch.nn.ModuleList(torch.nn.Linear(width, width)
                                              for _ in range(depth))

        def forward(self, x):
            for layer in self.layers:
                x = x + self.scale * torch.relu(layer(x))
            return x

    class Variant:
        def __init__(self, spec):
            self.name, self.group = spec["name"], None
            if spec["algorithm"]:  # read when the group's comm forms
                os.environ["HCCL_ALGORITHM"] = spec["algorithm"]
                self.group = dist.new_group(backend="hccl")
                del os.environ["HCCL_ALGORITHM"]
            torch.manual_seed(cfg["seed"])
            self.model = Net(cfg["width"], cfg["depth"])
            self.params = list(self.model.parameters())
            self.ddp = None
            if spec["bucket_mb"] is not None:
                self.ddp = torch.nn.parallel.DistributedDataParallel(
                    self.model, process_group=self.group, bucket_cap_mb=spec["bucket_mb"])
            self.net = self.ddp or self.model
            self.opt = torch.optim.SGD(self.params, lr=cfg["lr"])
            self.idle = torch.optim.SGD(self.params, lr=0.0)  # an update's work, no change
            n = sum(p.numel() for p in self.params)
            self.flat = torch.empty(n) if self.ddp is None else None  # (a): allocated once
            self.last_grad = 0.0
            for p in self.params:  # when backward computed the last gradient
                p.register_hook(self.grad_hook)
            self.warm, self.real, self.comp = [], [], []

        def grad_hook(self, _):
            self.last_grad = max(self.last_grad, mono_us())

        def real_step(self, x, y):
            t0 = mono_us()
            self.opt.zero_grad()
            loss = F.mse_loss(self.net(x), y)
            self.last_grad = 0.0
            b0 = mono_us()
            loss.backward()  # DDP: returns once every bucket's allreduce is done
            b1 = mono_us()
            if self.ddp is None:  # one allreduce of every gradient, flattened
                grads = [p.grad for p in self.params]
                torch.cat([g.reshape(-1) for g in grads], out=self.flat)
                dist.all_reduce(self.flat, group=self.group)
                self.flat.div_(world)
                at = 0
                for g in grads:
                    g.copy_(self.flat[at:at + g.numel()].view_as(g))
                    at += g.numel()
            self.opt.step()
            t1 = mono_us()
            return {"t0": t0, "b0": b0, "grad_done": self.last_grad, "b1": b1, "t1": t1,
                    "s": (t1 - t0) / 1e6, "loss": loss.item()}

        def compute_step(self, x, y):
            t0 = mono_us()
            self.opt.zero_grad()
            with self.ddp.no_sync() if self.ddp is not None else contextlib.nullcontext():
                loss = F.mse_loss(self.net(x), y)
                b0 = mono_us()
                loss.backward()
                b1 = mono_us()
            self.idle.step()
            return {"s": (mono_us() - t0) / 1e6, "bwd": (b1 - b0) / 1e6}

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("hccl")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE

    def batch(step):
        g = torch.Generator().manual_seed(cfg["seed"] * 100003 + step * 1009 + rank)
        return (torch.randn(cfg["batch"], cfg["width"], generator=g),
                torch.randn(cfg["batch"], cfg["width"], generator=g))

    vs = [Variant(spec) for spec in cfg["variants"]]
    init = torch.cat([p.detach().reshape(-1) for p in vs[0].params])  # every variant's
    for s in range(cfg["warmup"]):
        for v in vs:
            v.warm.append(v.real_step(*batch(s)))
    for i in range(cfg["steps"]):
        x, y = batch(cfg["warmup"] + i)
        for v in vs[i % len(vs):] + vs[:i % len(vs)]:  # each step in another order
            v.comp.append(v.compute_step(x, y))
            v.real.append(v.real_step(x, y))
    res = {"rank": rank, "variants": {}}
    for v in vs:
        final = torch.cat([p.detach().reshape(-1) for p in v.params])
        np.save(os.path.join(cfg["dir"], f"params.{v.name}.{rank}.npy"), final.numpy())
        res["variants"][v.name] = {"real": v.real, "compute": v.comp,
                                   "loss_first": (v.warm + v.real)[0]["loss"],
                                   "max_update": (final - init).abs().max().item()}
    with open(os.path.join(cfg["dir"], f"result.{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()
    return 0


# ---- the cluster: namespaces, bridge, tbf, daemons ----------------------------------------

def sh(*argv):
    r = subprocess.run(argv, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip() or r.returncode}")


def rate_bytes(rate):
    """A tc rate (10gbit, 800mbit, 1gbps, ...) in bytes per second."""
    m = re.fullmatch(r"([0-9.]+)([kmgt]?)(bit|bps)", rate.lower())
    if not m:
        raise SystemExit(f"ddp_overlap: --rate {rate}: expected e.g. 10gbit, 500mbit, 1gbps")
    v = float(m.group(1)) * 1000 ** " kmgt".index(m.group(2) or " ")
    return v / 8 if m.group(3) == "bit" else v


def _die_with_parent():
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Cluster:
    def __init__(self, nodes, rate, tmp):
        self.nodes, self.rate, self.tmp = nodes, rate, tmp
        self.daemons, self.made = [], []

    def sock(self, k):
        return os.path.join(self.tmp, f"n{k}.sock")

    def up(self):
        # A bridge in NS-sw; node K: namespace NS-nK, eth0 = SUBNET.K, peer pK on the bridge;
        # tbf on both ends of each veth (burst: 4 ms at the rate, as 512 KB at 1 Gbit/s).
        burst = str(max(64 << 10, int(rate_bytes(self.rate) * 0.004)))
        tbf = ["root", "tbf", "rate", self.rate, "burst", burst, "latency", "20ms"]
        sw = f"{NS}-sw"
        sh("ip", "netns", "add", sw)
        self.made.append(sw)
        sh("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        sh("ip", "-n", sw, "link", "set", "br0", "up")
        for k in range(1, self.nodes + 1):
            n = f"{NS}-n{k}"
            sh("ip", "netns", "add", n)
            self.made.append(n)
            sh("ip", "-n", n, "link", "set", "lo", "up")
            sh("ip", "-n", n, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{k}",
               "netns", sw)
            sh("ip", "-n", n, "addr", "add", f"{SUBNET}.{k}/24", "dev", "eth0")
            sh("ip", "-n", n, "link", "set", "eth0", "up")
            sh("ip", "-n", sw, "link", "set", f"p{k}", "master", "br0")
            sh("ip", "-n", sw, "link", "set", f"p{k}", "up")
            sh("tc", "-n", n, "qdisc", "replace", "dev", "eth0", *tbf)
            sh("tc", "-n", sw, "qdisc", "replace", "dev", f"p{k}", *tbf)
        for k in range(1, self.nodes + 1):
            log = open(os.path.join(self.tmp, f"n{k}.log"), "w")
            self.daemons.append(subprocess.Popen(
                ["ip", "netns", "exec", f"{NS}-n{k}", HCCLD, "--socket", self.sock(k),
                 "--foreground", "--listen", f"{SUBNET}.{k}:0", "--log-level", "error"],
                env=dict(os.environ, HCCL_IF_IP=f"{SUBNET}.{k}"), stdout=log, stderr=log,
                start_new_session=True, preexec_fn=_die_with_parent))
        deadline = time.monotonic() + 15
        for k, d in enumerate(self.daemons, 1):
            while not os.path.exists(self.sock(k)):
                if d.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"hccld of node {k} did not start: "
                                       f"{tail(os.path.join(self.tmp, f'n{k}.log'))}")
                time.sleep(0.05)

    def down(self):
        for d in self.daemons:
            if d.poll() is None:
                d.terminate()
        for d in self.daemons:
            try:
                d.wait(10)
            except subprocess.TimeoutExpired:
                d.kill()
                d.wait()
        self.daemons = []
        for n in reversed(self.made):
            subprocess.run(["ip", "netns", "del", n], capture_output=True, check=False)
        self.made = []


def tail(path, lines=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:]).rstrip()
    except OSError:
        return "(no output)"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- one job: N ranks, all their variants ---------------------------------------------------

class RankFailed(Exception):
    pass


def run_job(args, cluster, tmp, nodes, specs):
    """Runs the variants specs (name, bucket_mb, algorithm) in one job of nodes ranks; returns
    one result per variant."""
    d = tempfile.mkdtemp(prefix=f"job{nodes}.", dir=tmp)
    cfg = {"dir": d, "variants": specs, "seed": args.seed, "width": args.width,
           "depth": args.depth, "batch": args.batch, "lr": args.lr, "warmup": args.warmup,
           "steps": args.steps}
    with open(os.path.join(d, "cfg.json"), "w") as f:
        json.dump(cfg, f)
    base = {k: v for k, v in os.environ.items()
            if k not in ("HCCL_ALGO", "HCCL_ALGORITHM", "HCCL_PROF_ENABLE", "HCCL_PROF_FILE")}
    base.update(PYTHONPATH=os.pathsep.join(filter(None, [os.path.join(TOP, "python"),
                                                         os.environ.get("PYTHONPATH")])),
                OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                WORLD_SIZE=str(nodes), HCCL_PROF_ENABLE="1",
                HCCL_PROF_FILE=os.path.join(d, "prof.%r.json"))
    procs = []
    t_start = time.monotonic()
    try:
        for r in range(nodes):
            out = open(os.path.join(d, f"rank{r}.log"), "w")
            env = dict(base, RANK=str(r), LOCAL_RANK="0", HCCLD_SOCKET=cluster.sock(r + 1))
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                           "--worker", os.path.join(d, "cfg.json")],
                                          env=env, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True, preexec_fn=_die_with_parent))
        deadline = time.monotonic() + args.timeout
        while any(p.poll() is None for p in procs):
            bad = [r for r, p in enumerate(procs) if p.poll() not in (None, 0)]
            if bad or time.monotonic() > deadline:
                r = bad[0] if bad else next(r for r, p in enumerate(procs) if p.poll() is None)
                why = f"exit {procs[r].returncode}" if bad else f"hung ({args.timeout} s)"
                raise RankFailed(f"job of {nodes} nodes: rank {r} {why}:\n"
                                 f"{tail(os.path.join(d, f'rank{r}.log'))}")
            time.sleep(0.2)
        for r, p in enumerate(procs):
            if p.returncode != 0:
                raise RankFailed(f"job of {nodes} nodes: rank {r} exit {p.returncode}:\n"
                                 f"{tail(os.path.join(d, f'rank{r}.log'))}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    wall = time.monotonic() - t_start
    ranks = []
    for r in range(nodes):
        with open(os.path.join(d, f"result.{r}.json")) as f:
            ranks.append(json.load(f)["variants"])
    with open(os.path.join(d, "prof.0.json")) as f:
        prof = [json.loads(line) for line in f if line.strip()]
    out, steps = [], args.steps
    for spec in specs:
        rs = [rk[spec["name"]] for rk in ranks]
        step_s = statistics.median(max(rk["real"][i]["s"] for rk in rs) for i in range(steps))
        comp_s = statistics.median(max(rk["compute"][i]["s"] for rk in rs)
                                   for i in range(steps))
        # Inside the step, each the slowest rank's: forward, gradients computed, backward
        # returned, after backward (a: flatten, allreduce, copy back; then SGD), and backward
        # in the compute-only step.
        spans = {"fwd": ("t0", "b0"), "grads": ("b0", "grad_done"), "bwd": ("b0", "b1"),
                 "after": ("b1", "t1")}
        parts = {k: [max(rk["real"][i][e] - rk["real"][i][b] for rk in rs) / 1e6
                     for i in range(steps)] for k, (b, e) in spans.items()}
        parts["bwd0"] = [max(rk["compute"][i]["bwd"] for rk in rs) for i in range(steps)]
        v = dict(spec, nodes=nodes, dir=d, ranks=rs, prof=prof, step=step_s, compute=comp_s,
                 wall=wall, parts={k: statistics.median(x) for k, x in parts.items()})
        # Rank 0's allreduces in this variant's timed steps: the level-1 algorithm they ran.
        ops = [p for i in range(steps) for p in step_ops(v, i)[0]]
        v["algos"] = "+".join(sorted({p.get("algo", "?") for p in ops}))
        v["algo_by"] = "+".join(sorted({p.get("algo_by", "?") for p in ops}))
        out.append(v)
    return out


def check_params(np, v, ref):
    """The ranks' parameters equal among themselves and, if ref is given, close to ref; the
    rank 0 array is returned; the files are removed."""
    path = os.path.join(v["dir"], "params.{}.{}.npy").format
    msgs, ok, same = [], True, True
    p0 = np.load(path(v["name"], 0))
    for r in range(1, v["nodes"]):
        pr = np.load(path(v["name"], r), mmap_mode="r")
        if not np.allclose(pr, p0, **RANK_TOL):
            ok = False
            msgs.append(f"rank {r} differs from rank 0 by up to {np.abs(pr - p0).max():.3g}")
        same = same and np.array_equal(pr, p0)
        del pr
    if ok:
        msgs.append(f"{v['nodes']} ranks " + ("bit-identical" if same else "allclose"))
    if ref is not None:
        diff = float(np.abs(p0 - ref).max())
        close = bool(np.allclose(p0, ref, **TOL))
        ok = ok and close
        msgs.append(("matches" if close else "DOES NOT match") + f" (a): max |diff| {diff:.3g}"
                    + (" (bit-identical)" if diff == 0 else ""))
    for r in range(v["nodes"]):
        os.unlink(path(v["name"], r))
    v["check"], v["ok"] = "; ".join(msgs), ok
    return p0


# ---- report --------------------------------------------------------------------------------

def step_ops(v, step=-1):
    """Rank 0's allreduce records of one timed step (by time window), in start order, and that
    step's timings."""
    st = v["ranks"][0]["real"][step]
    ops = sorted((p for p in v["prof"]
                  if p["op"] == "allreduce" and st["t0"] <= p["start_us"] <= st["t1"]),
                 key=lambda p: p["start_us"])
    return ops, st


def label(v):
    if v["bucket_mb"] is None:
        return "(a) allreduce after bwd", "one flat tensor"
    nb = len(step_ops(v)[0])
    if v["algorithm"]:
        return f"(c) DDP {v['bucket_mb']:g} MB buckets", f"{v['algorithm']}, {nb} buckets"
    return "(b) DDP", f"{v['bucket_mb']:g} MB, {nb} buckets"


def print_table(rows, base):
    head = (f"{'variant':<25}{'nodes':>5}  {'bucket_cap_mb/algorithm':<25}{'l1 algo':<9}"
            f"{'step s':>7}{'compute s':>10}{'exposed':>8}{'speedup':>8}")
    print(head)
    print("-" * len(head))
    for v in rows:
        name, what = label(v)
        exposed = (v["step"] - v["compute"]) / v["step"]
        speed = base[v["nodes"]]["step"] / v["step"]
        print(f"{name:<25}{v['nodes']:>5}  {what:<25}{v['algos']:<9}{v['step']:>7.3f}"
              f"{v['compute']:>10.3f}{exposed:>8.0%}{speed:>7.2f}x")


def short(v):
    if v["bucket_mb"] is None:
        return f"(a) on {v['nodes']} nodes"
    if v["algorithm"]:
        return f"(c) {v['algorithm']} {v['bucket_mb']:g} MB"
    return f"(b) {v['bucket_mb']:g} MB"


def print_parts(rows):
    print("\nInside the step (s; each the median over the timed steps of the slowest rank's):"
          " forward;\nin backward, the last gradient computed and loss.backward() returned;"
          " after backward\n(a: flatten, allreduce, copy back; all: SGD); backward of the"
          " compute-only step")
    head = (f"{'variant':<20}{'forward':>9}{'gradients':>11}{'backward':>10}{'after':>8}"
            f"{'backward alone':>16}")
    print(head)
    print("-" * len(head))
    for v in rows:
        q = v["parts"]
        print(f"{short(v):<20}{q['fwd']:>9.3f}{q['grads']:>11.3f}{q['bwd']:>10.3f}"
              f"{q['after']:>8.3f}{q['bwd0']:>16.3f}")


def print_overlap(v):
    """Rank 0's allreduces of its last timed step against that step's backward."""
    ops, st = step_ops(v)
    b0, b1, gd = st["b0"], st["b1"], st["grad_done"]
    name, what = label(v)
    seqs = f"seq {ops[0]['seq']}..{ops[-1]['seq']}" if ops else "no allreduce found"
    print(f"\nOverlap in hcclD's profile: {name} {what}, {v['nodes']} nodes, rank 0, timed step"
          f" {len(v['ranks'][0]['real'])} of {len(v['ranks'][0]['real'])} ({seqs}).")
    print(f"Times from the start of loss.backward(), which returned at {(b1 - b0) / 1e3:.1f} ms;"
          f" its last gradient was computed at {(gd - b0) / 1e3:.1f} ms (then DDP waited for"
          f" the allreduces still running):")
    for k, p in enumerate(ops, 1):
        s = p["start_us"]
        when = (f"{(b1 - s) / 1e3:5.1f} ms before backward ended" if s < b1
                else f"{(s - b1) / 1e3:5.1f} ms AFTER backward ended")
        during = "during" if s < gd else "after"
        print(f"  bucket {k:>2} of {len(ops)} ({p['bytes'] / 2**20:4.1f} MiB) started"
              f" {(s - b0) / 1e3:5.1f} ms in, {when}; ran {p['time_us'] / 1e3:5.1f} ms;"
              f" {during} gradient computation")
    return ops, st


def print_plain_profile(v):
    ops, st = step_ops(v)
    for p in ops:
        print(f"For contrast, (a) on {v['nodes']} nodes, same step: its one allreduce"
              f" ({p['bytes'] / 2**20:.1f} MiB, seq {p['seq']}) started"
              f" {(p['start_us'] - st['b1']) / 1e3:.1f} ms after backward ended (flattening)"
              f" and ran {p['time_us'] / 1e3:.1f} ms.")


# ---- main ------------------------------------------------------------------------------------

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", default="10gbit", help="tc tbf rate of every veth end [10gbit]")
    ap.add_argument("--nodes", type=int, default=2, help="nodes for (a) and (b) [2]")
    ap.add_argument("--big-nodes", type=int, default=4,
                    help="nodes for (c) and its (a); 0 skips (c) [4]")
    ap.add_argument("--buckets", default="1,5,25,100", help="bucket_cap_mb values of (b)")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per variant [5]")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first [2]")
    ap.add_argument("--batch", type=int, default=8, help="samples per rank and step [8]")
    ap.add_argument("--width", type=int, default=1024, help="Linear layer width [1024]")
    ap.add_argument("--depth", type=int, default=48, help="Linear layers [48]")
    ap.add_argument("--lr", type=float, default=0.05, help="SGD learning rate [0.05]")
    ap.add_argument("--seed", type=int, default=1, help="model and data seed [1]")
    ap.add_argument("--timeout", type=int, default=900,
                    help="seconds one job (all variants of a node count) may take [900]")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directory")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker is None:
        args.bucket_list = [float(b) for b in args.buckets.split(",") if b.strip()]
        if args.steps < 1 or args.nodes < 2 or not args.bucket_list or \
                args.big_nodes not in (0,) and args.big_nodes < 2:
            ap.error("need --steps >= 1, --nodes >= 2, --big-nodes 0 or >= 2, some --buckets")
        rate_bytes(args.rate)
    return args


def on_signal(sig, _frame):
    raise SystemExit(128 + sig)


def main():
    args = parse_args()
    if args.worker:
        return worker(args.worker)
    if os.geteuid() != 0:
        print("ddp_overlap: needs root (network namespaces, veths, tc)", file=sys.stderr)
        return 2
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            print(f"ddp_overlap: {tool} not found (iproute2)", file=sys.stderr)
            return 2
    if not os.access(HCCLD, os.X_OK):
        print(f"ddp_overlap: {HCCLD} is missing: run make first", file=sys.stderr)
        return 2
    import numpy as np

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    t_all = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="ddp-overlap-")
    cluster = Cluster(max(args.nodes, args.big_nodes), args.rate, tmp)
    rows, failed, summary = [], [], None
    try:
        cluster.up()
        print(f"{cluster.nodes} namespaces behind tbf {args.rate}, one hccld each; model "
              f"{args.depth} x Linear({args.width}, {args.width}), batch {args.batch} per rank, "
              f"{args.warmup} + {args.steps} steps per variant, taken in turn; load average "
              f"{os.getloadavg()[0]:.2f}", flush=True)

        def job(nodes, specs):
            vs = run_job(args, cluster, tmp, nodes, specs)
            print(f"  job of {nodes} nodes, {len(vs)} variants: {vs[0]['wall']:.0f} s",
                  flush=True)
            ref = None
            for v in vs:
                p0 = check_params(np, v, ref)
                if v["bucket_mb"] is None:
                    ref = p0  # the (a) of this job: first in it
                del p0
                rows.append(v)
                if not v["ok"]:
                    failed.append(f"{short(v)}: parameters do not match")
                r0 = v["ranks"][0]
                print(f"    {short(v):<17} step {v['step']:.3f} s, compute {v['compute']:.3f}"
                      f" s, loss {r0['loss_first']:.3f} -> {r0['real'][-1]['loss']:.3f},"
                      f" level 1 {v['algos']} by {v['algo_by']}; {v['check']}", flush=True)
            return vs

        n, big_n = args.nodes, args.big_nodes
        a, *bs = job(n, [{"name": "a", "bucket_mb": None, "algorithm": None}]
                     + [{"name": f"b{mb:g}", "bucket_mb": mb, "algorithm": None}
                        for mb in args.bucket_list])
        best = min(bs, key=lambda v: v["step"])
        base = {n: a}
        if big_n:
            base[big_n] = job(big_n, [{"name": "a", "bucket_mb": None, "algorithm": None}]
                              + [{"name": f"c{algo}", "bucket_mb": best["bucket_mb"],
                                  "algorithm": algo} for algo in ("RING", "MESH")])[0]
        print(f"\nstep: median over {args.steps} timed steps of the slowest rank; compute: the "
              "same forward+backward+SGD without communication; exposed = (step - compute) / "
              "step; speedup over (a) on as many nodes\n")
        print_table(rows, base)
        print_parts(rows)
        ops, st = print_overlap(best)
        print_plain_profile(a)
        early = [p for p in ops if p["start_us"] < st["grad_done"]]
        print(f"\nparameters after training: "
              f"{'all ranks equal and (b)/(c) match (a)' if not failed else 'MISMATCH'}"
              f" (largest update of a parameter: {a['ranks'][0]['max_update']:.3g})")
        cs = [v for v in rows if v["algorithm"]]
        big = "; ".join(f"{v['algorithm']} {base[v['nodes']]['step'] / v['step']:.2f}x"
                        for v in cs)
        sp = a["step"] / best["step"]
        q = best["parts"]
        text = (f"Summary: on {args.nodes} nodes at {args.rate}, hcclD ran DDP's bucket allreduces"
                f" while backward computed ({len(early)} of {len(ops)} started before the last"
                f" gradient, {best['bucket_mb']:g} MB buckets), and the fastest DDP took"
                f" {best['step']:.2f} s per step against {a['step']:.2f} s for one allreduce"
                f" after backward ({sp:.2f}x"
                + (", faster)" if sp > 1.05 else ", within 5%)" if sp >= 0.95 else
                   ", slower)"))
        if q["grads"] > 1.1 * q["bwd0"]:
            text += (f"; with the allreduces beside it, computing the gradients took"
                     f" {q['grads']:.2f} s instead of {q['bwd0']:.2f} s: communication"
                     f" costs CPU (daemons, TCP over veth) and competes with compute on"
                     f" {os.cpu_count()} cores")
        if big:
            text += f"; on {args.big_nodes} nodes, over (a) there: {big}"
        summary = text + "."
    except (RankFailed, RuntimeError) as e:
        print(f"ddp_overlap: {e}", file=sys.stderr)
        failed.append("a rank or the cluster failed")
    except KeyboardInterrupt:
        print("ddp_overlap: interrupted; cleaning up", file=sys.stderr)
        failed.append("interrupted")
    finally:
        cluster.down()
        if args.keep:
            print(f"(kept {tmp})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"(whole run {time.monotonic() - t_all:.0f} s; load average now"
          f" {os.getloadavg()[0]:.2f})")
    if summary:
        print(summary, flush=True)  # the last line: what the run showed
    if failed:
        print("ddp_overlap: FAILED: " + "; ".join(failed), file=sys.stderr)
        return 130 if failed == ["interrupted"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
