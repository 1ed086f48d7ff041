"""The command lines of the binaries, as their peers behave: --version and --help on each; what
hccld says when it starts (one NOTICE line once ready, as redis does; a detached hccld prints
its pid; a socket whose directories are missing gets them, as systemd's RuntimeDirectory= does,
and one that cannot be reached gets one error naming the directory); hccl-run as mpirun and
torchrun (the first failing rank stops the job, --tag-output, torchrun's variables, so that a
torch script runs unchanged, its result checked against gloo's)."""
import inspect
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

import ranks
from ranks import Daemon, hccl

HCCLD = hccl.daemon.tool("hccld")
BIN = os.path.dirname(HCCLD)
VERSION = subprocess.run([HCCLD, "--version"], capture_output=True, text=True,
                         timeout=10).stdout.split()[1]
TIMEOUT_S = 20


def run(*cmd):
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=TIMEOUT_S)


class VersionAndHelp(unittest.TestCase):
    TOOLS = ["hccld-ctl", "hccl-run", "hccl_perf_test", "hccl_latency_test", "hccl-prof",
             "hccl-topology"]

    def test_version(self):
        self.assertRegex(VERSION, r"^\d+\.\d+\.\d+$")
        for name in self.TOOLS:
            with self.subTest(tool=name):
                p = run(os.path.join(BIN, name), "--version")
                self.assertEqual((p.returncode, p.stdout, p.stderr),
                                 (0, f"{name} (hcclD) {VERSION}\n", ""))

    def test_python_package_version(self):
        self.assertEqual(hccl.__version__, VERSION)

    def test_public_python_api_has_docstrings(self):
        missing = []
        for name in hccl.__all__:
            obj = getattr(hccl, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if not inspect.getdoc(obj):
                missing.append(name)
            for attr, v in vars(obj).items() if inspect.isclass(obj) else ():
                fn = getattr(v, "__func__", v)
                if (not attr.startswith("_") and (inspect.isfunction(fn) or isinstance(v, property))
                        and not fn.__doc__):
                    missing.append(f"{name}.{attr}")
        self.assertEqual(missing, [])

    def test_help(self):
        for name in self.TOOLS + ["hccld"]:
            with self.subTest(tool=name):
                p = run(os.path.join(BIN, name), "--help")
                self.assertEqual(p.returncode, 0, p.stderr)
                first = p.stdout.splitlines()[0] if p.stdout else ""
                self.assertTrue(first.startswith("usage: ") and name in first, p.stdout[:200])
                self.assertEqual(p.stderr, "")


class OneLineUsage(unittest.TestCase):
    def test_one_line_per_mistake(self):
        for name, args, line in [
                ("hccld", ["--log-levl", "info"],
                 "unknown option --log-levl (did you mean --log-level?)"),
                ("hccld", ["--log-level", "loud"], "--log-level 'loud': error, warn, info or debug"),
                ("hccld", ["--workers", "999"],
                 "--workers '999': executor threads, 0..256 (0: online CPUs)"),
                ("hccld", ["--socket"], "--socket needs a value"),
                ("hccld", ["extra"], "unexpected argument 'extra' (every setting is an option)"),
                ("hccl_perf_test", ["-b", "x"], "-b 'x': a size in bytes: 8, 4K, 1M, 1G"),
                ("hccl_perf_test", ["--hlep"], "unknown option --hlep (did you mean --help?)"),
                ("hccl_perf_test", ["-b"], "-b needs a value"),
                ("hccl_perf_test", ["-c", "2"], "-c '2': 0 or 1 (check the results)"),
                ("hccl_perf_test", ["-b", "1M", "-e", "1K"], "-b 1048576 -e 1024: need 0 < MIN <= MAX"),
                ("hccl_latency_test", ["-c", "0"], "-c '0': iterations, 1 or more"),
                ("hccl_latency_test", ["extra"],
                 "unexpected argument 'extra' (every setting is an option)")]:
            with self.subTest(args=args):
                p = run(os.path.join(BIN, name), *args)
                self.assertEqual((p.returncode, p.stdout, p.stderr),
                                 (2, "", f"{name}: {line}\nTry '{name} --help'.\n"))


class ManPages(unittest.TestCase):
    """build/man, made by help2man from --help: man reads each, and every long option that
    --help names is in its page (they cannot drift apart)."""
    PAGES = {"hccld": 8, "hccld-ctl": 8, "hccl-run": 1, "hccl_perf_test": 1,
             "hccl_latency_test": 1, "hccl-prof": 1, "hccl-topology": 1}

    def test_pages(self):
        for name, section in self.PAGES.items():
            with self.subTest(page=f"{name}.{section}"):
                page = os.path.join(os.path.dirname(BIN), "man", f"{name}.{section}")
                p = subprocess.run(["man", "-l", page], capture_output=True, text=True,
                                   timeout=TIMEOUT_S, env=dict(os.environ, MANPAGER="cat",
                                                               MANWIDTH="200"))
                self.assertEqual((p.returncode, p.stderr), (0, ""))
                text = p.stdout.replace("\u2010", "-")
                self.assertRegex(text, r"NAME\n +%s - \S" % re.escape(name))
                self.assertIn(VERSION, text.rstrip().splitlines()[-1])  # the footer
                helped = run(os.path.join(BIN, name), "--help").stdout
                for opt in set(re.findall(r"(?<![\w-])--[a-z][a-z-]+", helped)):
                    self.assertIn(opt, text)


class Completion(unittest.TestCase):
    """hccld-ctl's bash completion (tools/hccld-ctl.bash) under bash-completion, against a
    private daemon for the class names."""
    SCRIPT = """
source /usr/share/bash-completion/bash_completion
source "$TOP/tools/hccld-ctl.bash"
comp() {
    COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
    COMPREPLY=(); _hccld_ctl hccld-ctl "${COMP_WORDS[-1]}" "${COMP_WORDS[-2]}"
    echo "${COMPREPLY[*]}"
}
comp "$CTL" st
comp "$CTL" ""
comp "$CTL" qos ""
comp "$CTL" --admin-socket "$ADMIN" qos set ""
comp "$CTL" --admin-socket "$ADMIN" qos set H
comp "$CTL" qos set HIGH --p
comp "$CTL" --ve
comp "$CTL" watch --
"""

    def test_completes(self):
        with Daemon(listen="none") as d:
            p = subprocess.run(["bash", "-c", self.SCRIPT], capture_output=True, text=True,
                               timeout=TIMEOUT_S,
                               env=dict(os.environ, TOP=ranks.TOP, ADMIN=d.admin,
                                        CTL=os.path.join(BIN, "hccld-ctl")))
        self.assertEqual(p.stderr, "")
        self.assertEqual(p.stdout.splitlines(), [
            "status", "status topology comms metrics links watch qos", "list set assign",
            "HIGH MEDIUM LOW", "HIGH", "--priority", "--version", "--json --stall-s"])


class Start(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.pids = []

    def tearDown(self):
        ranks.terminate(self.pids)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def ready_line(self, p):
        """The first line of p's stderr that says ready (within TIMEOUT_S)."""
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            if not line:
                break
            if " ready, " in line:
                return line
        self.fail("hccld never said it was ready")

    def test_ready_line_and_missing_directories(self):
        sock = os.path.join(self.tmp, "a", "b", "h.sock")
        p = subprocess.Popen([HCCLD, "--socket", sock, "--listen", "none", "--foreground"],
                             stderr=subprocess.PIPE, text=True)
        self.pids.append(p.pid)
        line = self.ready_line(p)
        admin = os.path.join(self.tmp, "a", "b", "h-admin.sock")
        self.assertRegex(line, r"^\S+ hccld\[%d\] NOTICE INIT: " % p.pid)
        self.assertEqual(line.split("NOTICE INIT: ", 1)[1],
                         f"hccld {VERSION} ready, pid {p.pid}: socket {sock}, admin {admin}, "
                         "peers off (--listen none), metrics off\n")
        self.assertTrue(os.path.exists(sock))
        p.terminate()
        self.assertEqual(p.wait(TIMEOUT_S), 0)

    def test_detached_prints_pid(self):
        sock = os.path.join(self.tmp, "h.sock")
        # Its stderr stays the caller's (the log), so it goes to /dev/null here.
        p = subprocess.run([HCCLD, "--socket", sock, "--listen", "127.0.0.1:0"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           timeout=TIMEOUT_S)
        m = re.fullmatch(r"hccld: running in the background, pid (\d+)\n", p.stdout)
        self.assertIsNotNone(m, p.stdout)
        self.pids.append(int(m.group(1)))
        self.assertEqual(p.returncode, 0)
        os.kill(int(m.group(1)), 0)  # it runs
        self.assertTrue(os.path.exists(sock))

    def wait_for_line(self, path, text):
        """The first line of the file at path that holds text (within TIMEOUT_S)."""
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            if os.path.exists(path):
                with open(path) as f:
                    for line in f:
                        if text in line:
                            return line
            time.sleep(0.05)
        self.fail(f"no line with {text!r} in {path}")

    def test_log_file_detached_and_reopened(self):
        # A detached hccld with --log-file writes its log there, not to the caller's stderr
        # (which a pipe would then hold open); after a rotation (the file renamed), SIGHUP
        # makes it write to a new file of that name.
        sock = os.path.join(self.tmp, "h.sock")
        log = os.path.join(self.tmp, "hccld.log")
        p = subprocess.run([HCCLD, "--socket", sock, "--listen", "none", "--log-level", "info",
                            "--log-file", log], capture_output=True, text=True,
                           timeout=TIMEOUT_S)
        m = re.fullmatch(r"hccld: running in the background, pid (\d+)\n", p.stdout)
        self.assertIsNotNone(m, p.stdout + p.stderr)
        pid = int(m.group(1))
        self.pids.append(pid)
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        self.assertIn(f"hccld {VERSION} ready, pid {pid}: socket {sock}",
                      self.wait_for_line(log, " ready, "))
        os.rename(log, log + ".1")
        os.kill(pid, signal.SIGHUP)
        self.assertIn(f"SIGHUP: log reopened: {log}", self.wait_for_line(log, "SIGHUP"))
        with open(log + ".1") as f:
            self.assertNotIn("SIGHUP", f.read())

    def test_log_file_unwritable_one_error(self):
        log = os.path.join(self.tmp, "no-such-dir", "hccld.log")
        p = run(HCCLD, "--socket", os.path.join(self.tmp, "h.sock"), "--log-file", log)
        self.assertEqual((p.returncode, p.stdout), (2, ""))
        self.assertEqual(p.stderr, f"hccld: cannot write the log to {log}: "
                                   "No such file or directory\n")

    def test_file_in_the_path_one_error(self):
        afile = os.path.join(self.tmp, "afile")
        open(afile, "w").close()
        sock = os.path.join(afile, "h.sock")
        p = run(HCCLD, "--socket", sock, "--foreground")
        self.assertEqual(p.returncode, 1)
        lines = p.stderr.splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertEqual(lines[0].split("ERROR INIT: ", 1)[1],
                         f"{afile} is no directory, and the socket {sock} would go in it")

    def test_unreachable_directory_one_error(self):
        locked = os.path.join(self.tmp, "locked")
        os.mkdir(locked, 0o555)
        os.chmod(self.tmp, 0o755)
        sock = os.path.join(locked, "x", "h.sock")
        p = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                            HCCLD, "--socket", sock, "--foreground"],
                           capture_output=True, text=True, timeout=TIMEOUT_S)
        self.assertEqual(p.returncode, 1)
        lines = p.stderr.splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertEqual(lines[0].split("ERROR INIT: ", 1)[1],
                         f"cannot create {locked}/x, a directory of the socket {sock}: "
                         "Permission denied")


TRAIN = """
import sys
import torch
import torch.distributed as dist
import hccl.torch  # noqa: F401  (the backend)
dist.init_process_group(sys.argv[1])
t = torch.arange(6, dtype=torch.float32) * (dist.get_rank() + 1)
dist.all_reduce(t)
print(dist.get_rank(), dist.get_world_size(), t.tolist())
dist.destroy_process_group()
"""


class HcclRun(unittest.TestCase):
    RUN = os.path.join(BIN, "hccl-run")

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(listen="none")
        cls.env = dict(os.environ, HCCLD_SOCKET=cls.daemon.sock)
        for var in ("MASTER_ADDR", "MASTER_PORT"):
            cls.env.pop(var, None)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def run_job(self, *args, timeout=TIMEOUT_S, env=None):
        return subprocess.run([self.RUN, *args], capture_output=True, text=True, timeout=timeout,
                              env=env or self.env)

    def test_failing_rank_stops_the_job(self):
        # Rank 2 fails; the others would sleep a minute: they are stopped, and hccl-run returns
        # rank 2's status, saying which rank it was.
        p = self.run_job("-n", "4", "--", "sh", "-c",
                         'if [ "$RANK" = 2 ]; then sleep 0.2; exit 3; fi; exec sleep 60')
        self.assertEqual(p.returncode, 3)
        self.assertEqual(p.stderr, "hccl-run: rank 2 exited with status 3; stopping the other 3 "
                                   "ranks (SIGTERM, then SIGKILL after 5 s)\n")

    def test_keep_going_lets_the_others_end(self):
        # With --keep-going rank 1's failure stops nobody: rank 0 ends on its own (its line is
        # printed after rank 1 exited), and hccl-run returns rank 1's status.
        p = self.run_job("-n", "2", "--keep-going", "--", "sh", "-c",
                         'if [ "$RANK" = 1 ]; then exit 4; fi; sleep 0.5; echo "rank 0 ended"')
        self.assertEqual(p.returncode, 4)
        self.assertEqual(p.stdout, "rank 0 ended\n")
        self.assertEqual(p.stderr, "hccl-run: rank 1 exited with status 4; the other 1 rank runs "
                                   "on (--keep-going)\n")

    def test_sigterm_to_hccl_run_stops_the_ranks(self):
        # As mpirun: SIGTERM is forwarded; hccl-run returns once every rank is gone, with the
        # first one's status (128 + SIGTERM), and no rank outlives it.
        p = subprocess.Popen([self.RUN, "-n", "2", "--", "sh", "-c", 'echo $$; exec sleep 60'],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=self.env)
        pids = [int(p.stdout.readline()) for _ in range(2)]
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(TIMEOUT_S), 128 + signal.SIGTERM)
        self.assertEqual(p.stderr.read(), "")
        for pid in pids:
            with self.assertRaises(ProcessLookupError):
                os.kill(pid, 0)

    def test_rank_ignoring_sigterm_is_killed(self):
        p = self.run_job("-n", "2", "--grace", "0.5", "--", "sh", "-c",
                         'trap "" TERM; if [ "$RANK" = 1 ]; then exit 1; fi; sleep 60')
        self.assertEqual(p.returncode, 1)
        self.assertEqual(p.stderr, "hccl-run: rank 1 exited with status 1; stopping the other 1 "
                                   "rank (SIGTERM, then SIGKILL after 0.5 s)\n")

    def test_environment_and_tags(self):
        p = self.run_job("-n", "3", "--tag-output", "--", "sh", "-c",
                         'echo "$RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK '
                         '$MASTER_ADDR $HCCL_RANK $HCCL_WORLD_SIZE"; echo "e$RANK" >&2')
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(sorted(p.stdout.splitlines()),
                         [f"[1,{r}]<stdout>:{r} 3 {r} 3 0 127.0.0.1 {r} 3" for r in range(3)])
        self.assertEqual(sorted(p.stderr.splitlines()),
                         [f"[1,{r}]<stderr>:e{r}" for r in range(3)])
        port = self.run_job("-n", "1", "--", "sh", "-c", "echo $MASTER_PORT").stdout
        self.assertTrue(0 < int(port) < 65536)
        kept = self.run_job("-n", "1", "--", "sh", "-c", "echo $MASTER_ADDR:$MASTER_PORT",
                            env=dict(self.env, MASTER_ADDR="127.0.0.2", MASTER_PORT="1234"))
        self.assertEqual(kept.stdout, "127.0.0.2:1234\n")

    def test_usage_errors(self):
        for args, line in [(["-n", "0", "true"], "-n '0': the number of ranks, 1..4096"),
                           (["-n", "2"], "which program? hccl-run -n 2 -- PROG [ARGS...]"),
                           (["true"], "how many ranks? -n N"),
                           (["-n", "2", "--tag-outptu", "true"],
                            "unknown option --tag-outptu (did you mean --tag-output?)"),
                           (["-n", "2", "--map-by", "core", "true"],
                            "--map-by 'core': slot or node")]:
            with self.subTest(args=args):
                p = self.run_job(*args)
                self.assertEqual((p.returncode, p.stderr),
                                 (2, f"hccl-run: {line}\nTry 'hccl-run --help'.\n"))

    def test_torch_script_unchanged(self):
        with tempfile.NamedTemporaryFile("w", suffix=".py") as f:
            f.write(TRAIN)
            f.flush()
            env = dict(self.env, PYTHONPATH=os.path.join(ranks.TOP, "python"))
            out = {}
            for backend in ("hccl", "gloo"):
                # Tagged: two ranks' unbuffered prints would mix on one pipe.
                p = self.run_job("-n", "2", "--tag-output", "--", "/usr/bin/python3", f.name,
                                 backend, timeout=120, env=env)
                self.assertEqual(p.returncode, 0, p.stderr)
                out[backend] = sorted(p.stdout.splitlines())
        self.assertEqual(len(out["hccl"]), 2)
        self.assertEqual(out["hccl"], out["gloo"])


if __name__ == "__main__":
    unittest.main()
