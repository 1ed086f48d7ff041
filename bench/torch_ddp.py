"""One rank of bench/torch.sh's DDP part: DistributedDataParallel training steps through BACKEND
on the model of examples/ddp_overlap.py (a residual MLP of DEPTH Linear(1024, 1024), batch 8
per rank, SGD, default bucket_cap_mb), and the same step with no communication. Rank 0 prints
"ddp_ms compute_ms": the slowest rank's median step and the median compute-only step.

    torch_ddp.py BACKEND STEPS [DEPTH]      (env:// from the environment)

BACKEND hccl-R: "hccl" with hccl.torch_hooks.registered_allreduce_hook, the buckets registered
with hcclD (an arena of HCCL_BUFFSIZE=1024 MB unless set, room for the 200 MB of buckets).
"""
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hccl.torch  # noqa: E402,F401

WIDTH, BATCH = 1024, 8


class Net(torch.nn.Module):
    """x + relu(Linear(x)) / sqrt(depth), depth times (as examples/ddp_overlap.py's)."""

    def __init__(self, depth):
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(depth))
        self.scale = 1 / math.sqrt(depth)

    def forward(self, x):
        for layer in self.layers:
            x = x + torch.relu(layer(x)) * self.scale
        return x


def timed_step(model, opt, x, y):
    t0 = time.perf_counter()
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    return time.perf_counter() - t0


def main():
    backend, steps = sys.argv[1], int(sys.argv[2])
    depth = int(sys.argv[3]) if len(sys.argv) > 3 else 48
    torch.set_num_threads(1)  # the ranks share the machine's cores
    registered = backend == "hccl-R"
    if registered:
        os.environ.setdefault("HCCL_BUFFSIZE", "1024")
    dist.init_process_group("hccl" if registered else backend)
    torch.manual_seed(1)
    ddp = torch.nn.parallel.DistributedDataParallel(Net(depth))
    if registered:
        from hccl.torch_hooks import registered_allreduce_hook  # noqa: E402
        ddp.register_comm_hook(None, registered_allreduce_hook)
    plain = Net(depth)
    opts = [torch.optim.SGD(m.parameters(), lr=1e-3) for m in (ddp, plain)]
    g = torch.Generator().manual_seed(dist.get_rank())
    ddp_s, plain_s = [], []
    for step in range(steps + 2):  # two warm-up steps
        x, y = torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, WIDTH, generator=g)
        dist.barrier()
        d = timed_step(ddp, opts[0], x, y)
        p = timed_step(plain, opts[1], x, y)
        if step >= 2:
            ddp_s.append(d)
            plain_s.append(p)
    med = torch.tensor([statistics.median(ddp_s)], dtype=torch.float64)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print(f"{med.item() * 1e3:.1f} {statistics.median(plain_s) * 1e3:.1f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
