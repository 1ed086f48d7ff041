"""hccld --metrics-listen against a real Prometheus (Debian's prometheus package): two private
daemons serve /metrics, a job runs across them, and Prometheus, started by the test on
loopback, scrapes them until the op and byte counters it stored equal what `hccld-ctl status
--json` says. Also: only GET (405 otherwise, with Allow), only /metrics (404), the exposition
passes `promtool check metrics`, and systemd/hccld-alerts.yml passes `promtool check rules`."""
import json
import re
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.parse
import urllib.request

import numpy as np

import ranks
from ranks import TOP, Daemon, hccl, run_ranks  # noqa: F401

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, method="GET", timeout=10):
    """(status, headers, body) of one request; HTTP errors are answers too, and a refused
    connection is status 0."""
    req = urllib.request.Request(url, method=method, data=b"x" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()
    except urllib.error.URLError:
        return 0, {}, ""  # nobody listens (yet)


def ctl_json(daemon, what):
    out = subprocess.run([hccl.daemon.tool("hccld-ctl"), "--admin-socket", daemon.admin,
                          "--json", what], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def status(daemon):
    return ctl_json(daemon, "status")


def ctl_metrics_json(daemon, *args):
    return subprocess.run([hccl.daemon.tool("hccld-ctl"), "--admin-socket", daemon.admin, *args],
                          capture_output=True, text=True, check=False)


def sample(text, name):
    """The value of an unlabelled sample in an exposition."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in the exposition")


def allreduces(comm, r, n):
    x = np.arange(1 << 18, dtype=np.float32) + r
    for _ in range(5):
        y = comm.all_reduce(x)
    np.testing.assert_array_equal(y, sum(np.arange(1 << 18, dtype=np.float32) + q
                                         for q in range(n)))
    return True


class TestPrometheus(unittest.TestCase):
    # One pair of daemons for the class: the test process's own connection (for root infos)
    # stays with the first one.
    @classmethod
    def setUpClass(cls):
        cls.ports = [free_port(), free_port()]
        cls.daemons = [Daemon(args=("--metrics-listen", f"127.0.0.1:{p}")) for p in cls.ports]
        os.environ["HCCLD_SOCKET"] = cls.daemons[0].sock  # the root info's daemon

    @classmethod
    def tearDownClass(cls):
        for d in cls.daemons:
            d.stop()

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="hccld-prom-")
        self.prom = None

    def tearDown(self):
        if self.prom is not None and self.prom.poll() is None:
            self.prom.terminate()
            try:
                self.prom.wait(15)
            except subprocess.TimeoutExpired:
                self.prom.kill()
                self.prom.wait()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def url(self, k, path="/metrics"):
        return f"http://127.0.0.1:{self.ports[k]}{path}"

    def test_single_node_job_counted(self):
        """Ranks of one daemon compute among themselves in shared memory (level 0 cooperative,
        the default for one tenant): their pieces count in hccld_ops_total while the comm
        lives (hccld_comm_ops_total too) and after it is gone, so the counter never falls; their
        ops (timed by rank 0) in the duration histogram, its buckets cumulative."""
        def job(comm, r, n):
            for _ in range(20):
                comm.all_reduce(np.ones(4, np.float32))
            comm.barrier()  # every rank's pieces are posted
            body = get(self.url(0))[2] if r == 0 else ""
            ids = [c["id"] for c in ctl_json(self.daemons[0], "comms")] if r == 0 else []
            comm.barrier()  # the comm lives until rank 0 has read
            return body, ids

        first = get(self.url(0))[2]
        before = sample(first, "hccld_ops_total")
        body, ids = run_ranks(2, job, socks=[self.daemons[0].sock] * 2)[0]
        last = get(self.url(0))[2]
        after = sample(last, "hccld_ops_total")
        during = sample(body, "hccld_ops_total")
        timed = [sample(x, "hccld_op_duration_seconds_count") for x in (first, body, last)]
        self.assertGreaterEqual(timed[1] - timed[0], 21)
        self.assertGreaterEqual(timed[2], timed[1])
        self.assertGreater(sample(body, "hccld_op_duration_seconds_sum"),
                           sample(first, "hccld_op_duration_seconds_sum"))
        buckets = [float(x.split()[-1]) for x in body.splitlines()
                   if x.startswith("hccld_op_duration_seconds_bucket{")]
        self.assertEqual(buckets, sorted(buckets))
        self.assertEqual(buckets[-1], timed[1])
        per_comm = [float(x.split()[-1]) for x in body.splitlines()
                    if x.startswith("hccld_comm_ops_total{")]
        # hccld-ctl --json names each comm as the labels do (an id of 2^31 and up was negative).
        labels = re.findall(r'hccld_comm_ops_total\{comm="(\d+)"', body)
        self.assertEqual(sorted(ids), sorted(int(x) for x in labels))
        self.assertGreaterEqual(during - before, 21)  # 20 allreduces and a barrier at least
        self.assertTrue(any(v >= 21 for v in per_comm), per_comm)
        self.assertGreaterEqual(after, during)

    def test_lane_ops_counted(self):
        """A comm across daemons runs its small ops between its ranks (lanes), past both
        daemons: each daemon counts them all the same, as its ranks report them, in
        hccld_ops_total (while the comm lives and after it is gone), hccld_comm_ops_total and
        the duration histogram; the daemons moved none of their bytes."""
        def job(comm, r, n):
            for _ in range(20):
                y = comm.all_reduce(np.full(4, r + 1, np.float32))
            np.testing.assert_array_equal(y, np.full(4, 3, np.float32))
            comm.barrier()  # 21 lane ops on each rank
            body = get(self.url(r))[2]
            comm.barrier()  # the comm lives until both have read
            return body

        first = [get(self.url(k))[2] for k in range(2)]
        bodies = run_ranks(2, job, socks=[d.sock for d in self.daemons])
        last = [get(self.url(k))[2] for k in range(2)]
        for k in range(2):
            with self.subTest(daemon=k):
                ops = [sample(x, "hccld_ops_total") for x in (first[k], bodies[k], last[k])]
                self.assertEqual((ops[1] - ops[0], ops[2] - ops[0]), (21, 22))
                timed = [sample(x, "hccld_op_duration_seconds_count")
                         for x in (first[k], bodies[k])]
                self.assertEqual(timed[1] - timed[0], 21)
                per_comm = [float(x.split()[-1]) for x in bodies[k].splitlines()
                            if x.startswith("hccld_comm_ops_total{")]
                self.assertIn(21.0, per_comm)
                self.assertEqual(sample(last[k], "hccld_net_sent_bytes_total"),
                                 sample(first[k], "hccld_net_sent_bytes_total"))

    def test_ctl_metrics_has_no_json(self):
        """hccld-ctl metrics prints Prometheus's text; asked for JSON it says why not (exit 2)."""
        for args in (("--json", "metrics"), ("metrics", "--json")):
            out = ctl_metrics_json(self.daemons[0], *args)
            self.assertEqual(out.returncode, 2)
            self.assertIn("metrics is Prometheus's text format and has no --json", out.stderr)
        out = ctl_metrics_json(self.daemons[0], "metrics")
        self.assertEqual(out.returncode, 0)
        self.assertIn("# TYPE hccld_ops_total counter", out.stdout)

    def test_http_surface(self):
        code, headers, body = get(self.url(0))
        self.assertEqual(code, 200)
        self.assertTrue(headers["Content-Type"].startswith("text/plain; version=0.0.4"))
        self.assertIn("# TYPE hccld_ops_total counter", body)
        for method in ("POST", "PUT", "DELETE", "HEAD"):
            code, headers, _ = get(self.url(0), method=method)
            self.assertEqual(code, 405, method)
            self.assertEqual(headers["Allow"], "GET")
        for path in ("/", "/metrics/", "/metricsx", "/debug"):
            self.assertEqual(get(self.url(0, path))[0], 404, path)
        # hccld-ctl status names the endpoint; hccld-ctl metrics prints the same families.
        self.assertEqual(status(self.daemons[0])["metrics_addr"], f"127.0.0.1:{self.ports[0]}")
        ctl = subprocess.run([hccl.daemon.tool("hccld-ctl"), "--admin-socket",
                              self.daemons[0].admin, "metrics"], check=True, capture_output=True,
                             text=True).stdout
        families = sorted(line for line in body.splitlines() if line.startswith("# TYPE"))
        self.assertEqual(families,
                         sorted(line for line in ctl.splitlines() if line.startswith("# TYPE")))

    def test_promtool_accepts_exposition_and_rules(self):
        url = self.url(0)

        def scrape_while_formed(comm, r, n):
            allreduces(comm, r, n)
            return get(url)[2]

        body = run_ranks(2, scrape_while_formed, socks=[d.sock for d in self.daemons])[0]
        self.assertRegex(body, r'hccld_comm_ops_total\{comm="\d+",job="[0-9a-f]+",'
                               r'class="MEDIUM"\} [1-9]')
        self.assertRegex(body, r'hccld_comm_broken\{comm="\d+",[^}]*\} 0\n')
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=body, capture_output=True,
                               text=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        rules = os.path.join(TOP, "systemd", "hccld-alerts.yml")
        check = subprocess.run([PROMTOOL, "check", "rules", rules], capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)
        self.assertIn("SUCCESS: 7 rules found", check.stdout)

    def query(self, port, expr):
        q = urllib.parse.urlencode({"query": expr})
        code, _, body = get(f"http://127.0.0.1:{port}/api/v1/query?{q}")
        if code != 200:
            return None
        res = json.loads(body)["data"]["result"]
        return {r["metric"].get("instance"): float(r["value"][1]) for r in res}

    def test_scraped_by_prometheus(self):
        run_ranks(2, allreduces, socks=[d.sock for d in self.daemons])
        want = {}
        for k, d in enumerate(self.daemons):
            st = status(d)
            self.assertGreater(st["ops_done"], 0)
            self.assertGreater(st["net_tx_bytes"], 0)
            want[f"127.0.0.1:{self.ports[k]}"] = st
        web = free_port()
        conf = os.path.join(self.tmp, "prometheus.yml")
        with open(conf, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "rule_files: [%s]\n"
                    "scrape_configs:\n  - job_name: hccld\n    static_configs:\n"
                    "      - targets: [%s]\n"
                    % (json.dumps(os.path.join(TOP, "systemd", "hccld-alerts.yml")),
                       ", ".join(f'"{t}"' for t in want)))
        log = open(os.path.join(self.tmp, "prometheus.log"), "w")
        self.prom = subprocess.Popen([PROMETHEUS, f"--config.file={conf}",
                                      f"--storage.tsdb.path={self.tmp}/data",
                                      f"--web.listen-address=127.0.0.1:{web}"],
                                     stdout=log, stderr=subprocess.STDOUT)
        got = {}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and self.prom.poll() is None:
            ops = self.query(web, 'hccld_ops_total{job="hccld"}') or {}
            tx = self.query(web, 'hccld_net_sent_bytes_total{job="hccld"}') or {}
            rx = self.query(web, 'hccld_net_received_bytes_total{job="hccld"}') or {}
            got = {i: (ops.get(i), tx.get(i), rx.get(i)) for i in want}
            if all(got[i] == (float(st["ops_done"]), float(st["net_tx_bytes"]),
                              float(st["net_rx_bytes"])) for i, st in want.items()):
                break
            time.sleep(0.5)
        log.close()
        with open(os.path.join(self.tmp, "prometheus.log")) as f:
            self.assertIsNone(self.prom.poll(), f.read())
        for i, st in want.items():
            self.assertEqual(got[i], (float(st["ops_done"]), float(st["net_tx_bytes"]),
                                      float(st["net_rx_bytes"])), i)
        # The same numbers straight from the endpoint.
        for k, d in enumerate(self.daemons):
            body = get(self.url(k))[2]
            st = status(d)
            self.assertEqual(sample(body, "hccld_ops_total"), st["ops_done"])
            self.assertEqual(sample(body, "hccld_net_sent_bytes_total"), st["net_tx_bytes"])
        up = self.query(web, 'up{job="hccld"}')
        self.assertEqual(sorted(up.values()), [1.0, 1.0])


    def test_links(self):
        # hccld-ctl links: each daemon sees one data connection to the other, named by the
        # other's data address and by the address the other advertises, that carried at least
        # the payload its status counts; /metrics shows the same per-peer totals and the two
        # names in hccld_peer_info (the monitor samples every second: wait for one).
        run_ranks(2, allreduces, socks=[d.sock for d in self.daemons])

        def sample_links():
            return [json.loads(subprocess.run(
                [hccl.daemon.tool("hccld-ctl"), "--admin-socket", d.admin, "links", "--json"],
                check=True, capture_output=True, text=True).stdout) for d in self.daemons]

        # Each daemon samples on its own second: wait (bounded) until both have sampled the
        # quiet link, so that what one end had sent the other had received (but for a closed
        # connection's FIN, which takes one byte of sequence, and its BYE record, 32 bytes that
        # the other end may close before it reads: FINS at most, for up to 8 connections).
        def skew(ends):
            return max(abs(ends[0].get("tx_bytes", 0) - ends[1].get("rx_bytes", -99)),
                       abs(ends[1].get("tx_bytes", 0) - ends[0].get("rx_bytes", -99)))

        FINS = 8 * (1 + 32)
        deadline = time.monotonic() + 10
        while True:
            time.sleep(1.2)
            links = sample_links()
            ends = [ln["peers"][0] if len(ln["peers"]) == 1 else {} for ln in links]
            if skew(ends) <= FINS or time.monotonic() > deadline:
                break
        for k, d in enumerate(self.daemons):
            st, mine = status(d), links[k]
            other = status(self.daemons[1 - k])["advertised"]
            self.assertEqual(len(mine["peers"]), 1, mine)
            peer = mine["peers"][0]
            self.assertTrue(peer["peer"].startswith("127.0.0.1:"), peer)
            # The data listener is not the advertised one: the two names differ.
            self.assertNotEqual(peer["peer"], other)
            self.assertEqual(peer["daemon"], other, peer)
            self.assertEqual([ln["daemon"] for ln in mine["links"]],
                             [other] * len(mine["links"]), mine)
            self.assertGreaterEqual(peer["tx_bytes"], st["net_tx_bytes"])
            self.assertGreaterEqual(peer["rx_bytes"], st["net_rx_bytes"])
            self.assertEqual((peer["retrans"], peer["lost"]), (0, 0))
            body = get(self.url(k))[2]
            label = '{peer="%s"}' % peer["peer"]
            self.assertEqual(sample(body, "hccld_peer_sent_bytes_total" + label),
                             peer["tx_bytes"])
            self.assertEqual(sample(body, "hccld_peer_received_bytes_total" + label),
                             peer["rx_bytes"])
            self.assertEqual(sample(body, 'hccld_peer_info{peer="%s",daemon="%s"}'
                                    % (peer["peer"], other)), 1)
        # What one end sent the other received (the same TCP connections).
        self.assertLessEqual(skew(ends), FINS, ends)
        text = subprocess.run([hccl.daemon.tool("hccld-ctl"), "--admin-socket",
                               self.daemons[0].admin, "links"], check=True, capture_output=True,
                              text=True).stdout
        self.assertIn(links[0]["peers"][0]["peer"], text)
        self.assertIn(links[0]["peers"][0]["daemon"], text)


class TestMetricsConfig(unittest.TestCase):
    def test_conf_key_and_bad_address(self):
        tmp = tempfile.mkdtemp(prefix="hccld-conf-")
        try:
            conf = os.path.join(tmp, "hccld.conf")
            port = free_port()
            with open(conf, "w") as f:
                f.write(f"[daemon]\nmetrics_listen = 127.0.0.1:{port}\n")
            with Daemon(args=("--config", conf)) as d:
                self.assertEqual(status(d)["metrics_addr"], f"127.0.0.1:{port}")
                self.assertEqual(get(f"http://127.0.0.1:{port}/metrics")[0], 200)
            # Off by default: no endpoint, and status says so.
            with Daemon() as d:
                self.assertEqual(status(d)["metrics_addr"], "")
            # An address hccld cannot listen on stops the start, named.
            for bad in ("localhost:9464", "127.0.0.1", "256.1.1.1:80"):
                r = subprocess.run([hccl.daemon.tool("hccld"), "--socket",
                                    os.path.join(tmp, "x.sock"), "--foreground", "--listen",
                                    "none", "--metrics-listen", bad], capture_output=True,
                                   text=True, timeout=20)
                self.assertNotEqual(r.returncode, 0, bad)
                self.assertIn(f"--metrics-listen {bad}: want IP:PORT", r.stderr)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

if __name__ == "__main__":
    unittest.main()
