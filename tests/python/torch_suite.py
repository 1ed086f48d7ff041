"""torch's own distributed test suite (torch.testing._internal.distributed.distributed_test, as
Debian's python3-torch ships it) with one backend, as torch's test_distributed_spawn.py runs it:
every test spawns WORLD_SIZE processes whose default group is of that backend.

    BACKEND=hccl WORLD_SIZE=2 SUITE_OUT=OUT.json [SUITE_ONLY=test_a,test_b] \
        /usr/bin/python3 tests/python/torch_suite.py

The backend's ranks use the daemon at HCCLD_SOCKET. Writes {test: [outcome, reason]} to OUT.json,
outcome one of pass, fail, error, skip; SUITE_ONLY runs only the tests named. test_torch_suite.py
runs it and compares with torch_suite_expected.txt, which torch_suite_list.py makes from a run of
gloo and one of hccl. The arguments come by environment: torch's test utilities parse the
command line of whatever imports them."""
import json
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "shims"))  # expecttest, which Debian 12 lacks

if "TEMP_DIR" not in os.environ:  # the suite's barrier and init files; the children inherit it
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="hccl-torch-suite-")

import hccl.torch  # noqa: E402,F401 (registers the backend, in every spawned rank too)
from torch_suite_list import normal  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


class Outcomes(unittest.TextTestResult):
    """Records each test's outcome and, for a skip or failure, its reason's first line."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcomes = {}

    def _put(self, test, outcome, reason=""):
        self.outcomes[test.id().rsplit(".", 1)[-1]] = [
            outcome, normal(reason.strip().split("\n")[-1])]

    def addSuccess(self, test):  # noqa: N802 (unittest's names)
        super().addSuccess(test)
        self._put(test, "pass")

    def addFailure(self, test, err):  # noqa: N802
        super().addFailure(test, err)
        self._put(test, "fail", self._exc_info_to_string(err, test))

    def addError(self, test, err):  # noqa: N802
        super().addError(test, err)
        self._put(test, "error", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):  # noqa: N802
        super().addSkip(test, reason)
        self._put(test, "skip", reason)


def main():
    out, only = os.environ["SUITE_OUT"], os.environ.get("SUITE_ONLY")
    loader = unittest.TestLoader()
    if only:
        suite = unittest.TestSuite(TestDistBackendWithSpawn(name) for name in only.split(","))
    else:
        suite = loader.loadTestsFromTestCase(TestDistBackendWithSpawn)
    runner = unittest.TextTestRunner(resultclass=Outcomes, verbosity=1)
    result = runner.run(suite)
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result.outcomes, f, indent=0, sort_keys=True)


if __name__ == "__main__":
    main()
