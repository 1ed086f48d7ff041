"""The HCCL articles' Python calls, as they write them, in a loop: hccl.initialize() under
hccl-run and after dist.init_process_group("hccl"), hccl.set_allreduce_algorithm(
hccl.Algorithm.MESH), hccl.all_reduce(tensor, algorithm=hccl.Algorithm.MESH) and
hccl.all_reduce_async(bucket_grad), across two daemons; every result compared element by element,
the algorithm each call ran read from the profile records, and ranks that ask for different
algorithms get HCCL_E_PARA."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import ranks
from ranks import TOP, Daemon, setUpModule, tearDownModule  # noqa: F401 (unittest finds them)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hccl  # noqa: E402
import hccl.torch  # noqa: E402,F401
from test_torch import run_torch  # noqa: E402

STEPS = 10

# The articles' calls, as they write them, in a training loop's shape.
SNIPPET = """
import os, sys
import torch
import hccl

hccl.initialize()
hccl.set_allreduce_algorithm(hccl.Algorithm.MESH)

comm = hccl.initialize()
rank, size = comm.rank, comm.size
for step in range(int(sys.argv[2])):
    tensor = torch.full((1000,), float(rank + step))
    hccl.all_reduce(tensor, algorithm=hccl.Algorithm.RING)
    bucket_grad = torch.arange(70000, dtype=torch.float32) * (rank + 1)
    handle = hccl.all_reduce_async(bucket_grad)
    assert torch.equal(tensor, torch.full((1000,), float(sum(range(size)) + size * step)))
    handle.wait()
    want = torch.arange(70000, dtype=torch.float32) * (size * (size + 1) // 2)
    assert torch.equal(bucket_grad, want), bucket_grad[:4]
try:
    hccl.all_reduce(torch.ones(4), algorithm="ring" if rank == 0 else "fullmesh")
    mismatch = "none"
except hccl.HcclError as e:
    mismatch = e.name
open(os.path.join(sys.argv[1], str(rank)), "w").write(mismatch)
"""


def records(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


class TestArticles(unittest.TestCase):
    def test_snippets_under_hccl_run(self):
        """4 ranks on 2 daemons under hccl-run: hccl.initialize() from its environment."""
        out = tempfile.mkdtemp(prefix="hccl-articles-")
        other = Daemon()
        try:
            env = dict(os.environ, PYTHONPATH=os.path.join(TOP, "python"), HCCL_PROF_ENABLE="1",
                       HCCL_PROF_FILE=os.path.join(out, "prof.%r.json"))
            run = os.path.join(os.path.dirname(os.environ.get(
                "HCCLD_BIN", os.path.join(TOP, "build", "bin", "hccld"))), "hccl-run")
            subprocess.run([run, "-n", "4", "--daemons", f"{ranks.DAEMON.sock},{other.sock}",
                            "--", "/usr/bin/python3", "-c", SNIPPET, out, str(STEPS)],
                           env=env, timeout=120, check=True)
            said = {}
            for r in range(4):
                with open(os.path.join(out, str(r)), encoding="utf-8") as f:
                    said[r] = f.read()
            recs = [x for x in records(os.path.join(out, "prof.0.json"))
                    if x.get("op") == "allreduce"]
        finally:
            other.stop()
            shutil.rmtree(out, ignore_errors=True)
        self.assertEqual(said, {r: "HCCL_E_PARA" for r in range(4)})
        ran = [(x["algo"], x.get("algo_by")) for x in recs if x["result"] == 0]
        self.assertEqual(ran.count(("ring", "call")), STEPS, ran)
        self.assertEqual(ran.count(("fullmesh", "call")), STEPS, ran)

    def test_snippets_on_torch_default_group(self):
        """After dist.init_process_group("hccl"), hccl.initialize() takes the default group's
        comm; the calls run in order with the group's own ops, against gloo on the same
        inputs, on one daemon and across two."""
        def fn(r, n, gloo):
            comm = hccl.initialize()
            pg = dist.distributed_c10d._get_default_group()  # pylint: disable=protected-access
            same = comm is pg.comm
            hccl.set_allreduce_algorithm(hccl.Algorithm.MESH)
            got, want = [], []
            for step in range(STEPS):
                x = torch.randn(3000, generator=torch.Generator().manual_seed(step * 10 + r))
                a, b, c = x.clone(), x.clone(), x[::2].clone()
                hccl.all_reduce(a, algorithm=hccl.Algorithm.RING)
                handle = hccl.all_reduce_async(c)
                dist.all_reduce(x)  # the group's own op, between the module's
                dist.all_reduce(b, group=gloo)
                handle.wait()
                cg = b.clone()[::2]
                got += [a, x, c]
                want += [b, b, cg]
            hccl.set_allreduce_algorithm(None)
            return same, got, want

        for socks in (None, "two daemons"):
            with self.subTest(socks=socks):
                other = Daemon() if socks else None
                try:
                    res = run_torch(2, fn, socks=[ranks.DAEMON.sock, other.sock]
                                    if other else None)
                finally:
                    if other:
                        other.stop()
                for r, (same, got, want) in enumerate(res):
                    self.assertTrue(same)
                    for i, (h, g) in enumerate(zip(got, want)):
                        # Two ranks: any order adds their two floats alike.
                        self.assertTrue(torch.equal(h, g), f"rank {r} tensor {i}")

    def test_algorithm_names(self):
        self.assertEqual([a.value for a in hccl.Algorithm],
                         ["ring", "fullmesh", "H-D_R", "tree", "pairwise", "NB", "NHR"])
        with self.assertRaises(ValueError):
            hccl.set_allreduce_algorithm("bubble")


if __name__ == "__main__":
    sys.exit(unittest.main())
