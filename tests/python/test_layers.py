"""scripts/check-layers.py (make layer-check): it passes on the tree with no known exception
left, and fails on an include that breaks an arrow, naming it."""
import os
import shutil
import subprocess
import tempfile
import unittest

TOP = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
SCRIPT = os.path.join(TOP, "scripts", "check-layers.py")
FOLDERS = ["common", "libclient", "daemon", "tools", "proto"]


class TestLayerCheck(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hccld-layers-")
        for d in FOLDERS:
            shutil.copytree(os.path.join(TOP, d), os.path.join(self.tmp, d))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def check(self):
        p = subprocess.run(["/usr/bin/python3", SCRIPT, self.tmp], capture_output=True,
                           text=True, timeout=60, check=False)
        return p.returncode, p.stdout

    def edit(self, rel, old, new):
        path = os.path.join(self.tmp, rel)
        with open(path, encoding="utf-8") as f:
            text = f.read()
        self.assertIn(old, text)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text.replace(old, new, 1))

    def test_the_tree_passes(self):
        rc, out = self.check()
        self.assertEqual(rc, 0, out)
        self.assertRegex(out, r"^layers: ok; 0 known exceptions left")

    def test_an_upward_include_is_named(self):
        self.edit("daemon/algo/cost.c", '#include "algo/cost.h"\n',
                  '#include "algo/cost.h"\n#include "sched/engine.h"\n')
        rc, out = self.check()
        self.assertEqual(rc, 1)
        self.assertIn('layers: daemon/algo/cost.c: #include "sched/engine.h": algo -> sched is '
                      "not an arrow (algo may use api, common, proto)", out)

    def test_algo_and_transport_never_meet(self):
        self.edit("daemon/transport/tcp.c", '#include "transport/tcp_sock.h"\n',
                  '#include "transport/tcp_sock.h"\n#include "algo/algo.h"\n')
        rc, out = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("transport -> algo is not an arrow", out)

    def test_the_server_reaches_algo_through_sched_only(self):
        self.edit("daemon/server/status.c", '#include "algo_id.h"\n',
                  '#include "algo_id.h"\n#include "algo/algo.h"\n')
        rc, out = self.check()
        self.assertEqual(rc, 1)
        self.assertIn('daemon/server/status.c: #include "algo/algo.h": server -> algo is not an '
                      "arrow (server may use api, common, form, proto, sched)", out)

    def test_formation_never_sees_the_server(self):
        self.edit("daemon/form/comm.c", '#include "form/form_int.h"\n',
                  '#include "form/form_int.h"\n#include "server/server.h"\n')
        rc, out = self.check()
        self.assertEqual(rc, 1)
        self.assertIn("form -> server is not an arrow (form may use api, common, proto, sched)",
                      out)

if __name__ == "__main__":
    unittest.main()
