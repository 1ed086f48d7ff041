"""torch's own distributed test suite with backend "hccl" (torch_suite.py, every test in ranks of
their own against this module's daemon), held to what gloo passes on this machine
(torch_suite_expected.txt): at world size 2 each listed test passes, or is skipped for the reason
listed (the suite lets only gloo or nccl run it); at world size 4 the collective and
point-to-point tests listed after "# world size 4" pass."""
import json
import os
import subprocess
import tempfile
import unittest

import ranks
from ranks import setUpModule, tearDownModule  # noqa: F401 (unittest finds them)

LIST = os.path.join(ranks.HERE, "torch_suite_expected.txt")


def expected():
    """({test: "pass" or "skip REASON"} at world size 2, [tests] at world size 4)."""
    ws2, ws4, cur = {}, [], None
    with open(LIST, encoding="utf-8") as f:
        for line in f.read().split("\n"):
            if line == "# world size 4":
                cur = ws4
            elif cur is ws4 and line and not line.startswith("#"):
                ws4.append(line.strip())
            elif line and not line.startswith("#"):
                name, want = line.split(" ", 1)
                ws2[name] = want
    return ws2, ws4


def run_suite(world, names, timeout):
    """The named tests of the suite with hccl at world size world: {test: [outcome, reason]},
    and the suite's output."""
    with tempfile.TemporaryDirectory(prefix="hccl-torch-suite-") as d:
        out, tmp = os.path.join(d, "out.json"), os.path.join(d, "tmp")
        os.mkdir(tmp)
        env = dict(os.environ, BACKEND="hccl", WORLD_SIZE=str(world), SUITE_OUT=out,
                   SUITE_ONLY=",".join(names), TEMP_DIR=tmp)
        proc = subprocess.run(["/usr/bin/python3", os.path.join(ranks.HERE, "torch_suite.py")],
                              env=env, capture_output=True, text=True, timeout=timeout,
                              check=False)
        if not os.path.exists(out):
            raise AssertionError(f"the suite wrote no outcomes:\n{proc.stderr[-3000:]}")
        with open(out, encoding="utf-8") as f:
            return json.load(f), proc.stderr


class TestTorchSuite(unittest.TestCase):
    def check(self, world, want, timeout):
        got, log = run_suite(world, sorted(want), timeout)
        wrong = {name: got.get(name, ["missing", ""]) for name, w in want.items()
                 if " ".join(got.get(name, ["missing"])).strip() != w}
        self.assertEqual(wrong, {}, f"world size {world}: {len(wrong)} of {len(want)} tests did "
                         f"not do what the list says; the suite's output ends:\n{log[-3000:]}")

    def test_world_size_2(self):
        ws2, _ = expected()
        self.assertGreater(len(ws2), 60)
        self.check(2, ws2, 1200)

    def test_world_size_4(self):
        _, ws4 = expected()
        self.assertGreater(len(ws4), 0)
        self.check(4, {name: "pass" for name in ws4}, 900)
