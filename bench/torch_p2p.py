"""One rank of bench/torch.sh's point-to-point part: torch.distributed send/recv between ranks 0
and 1 through BACKEND, a ping-pong per size (rank 0 sends, rank 1 receives and sends back), its
round trips timed back to back after one barrier; rank 0 prints "size_bytes median_us" lines,
half the median round trip (one message's time). With "any" after the sizes, rank 0 receives
the pong from any source (dist.recv without src)."""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hccl.torch  # noqa: E402,F401

backend, sizes, iters = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], int(sys.argv[3])
anysrc = sys.argv[4:5] == ["any"]
dist.init_process_group(backend)
r = dist.get_rank()
for size in sizes:
    t = torch.ones(max(size // 4, 1))
    times = []
    dist.barrier()
    for i in range(iters + 3):
        t0 = time.perf_counter()
        if r == 0:
            dist.send(t, 1)
            dist.recv(t, None if anysrc else 1)
        elif r == 1:
            dist.recv(t, 0)
            dist.send(t, 0)
        if i >= 3:
            times.append(time.perf_counter() - t0)
    if r == 0:
        print(f"{size} {statistics.median(times) * 1e6 / 2:.1f}", flush=True)
dist.destroy_process_group()
