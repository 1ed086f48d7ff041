"""One rank of bench/torch.sh: torch.distributed all_reduce (fp32 sum) through BACKEND, in place
on one tensor per size (as DDP reduces its buckets), its iterations timed back to back after
one barrier (as hccl_perf_test -m times them); rank 0 prints "size_bytes median_us busbw_GBps"
lines (the slowest rank's median)."""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hccl.torch  # noqa: E402,F401

backend, sizes, iters = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], int(sys.argv[3])
dist.init_process_group(backend)
n, r = dist.get_world_size(), dist.get_rank()
for size in sizes:
    t = torch.ones(max(size // 4, 1))
    for _ in range(3):
        dist.all_reduce(t)
    times = []
    dist.barrier()
    for _ in range(iters):
        t0 = time.perf_counter()
        dist.all_reduce(t)
        times.append(time.perf_counter() - t0)
    # The slowest rank's median, as hccl_perf_test -m reports.
    med = torch.tensor([statistics.median(times)], dtype=torch.float64)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    if r == 0:
        us = med.item() * 1e6
        print(f"{size} {us:.1f} {size * 2 * (n - 1) / n / (us * 1e3):.3f}", flush=True)
dist.destroy_process_group()
