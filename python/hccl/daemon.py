"""hccl.daemon: a private hccld for one script or test run, on sockets of its own.

    with hccl.daemon.Daemon() as d:          # d.sock for HCCLD_SOCKET, d.admin for hccld-ctl
        os.environ["HCCLD_SOCKET"] = d.sock

The binary is $HCCLD_BIN, else a source tree's build/bin/hccld, else hccld on PATH; tool()
finds hccld-ctl and the others the same way ($HCCLD_CTL for hccld-ctl).
"""
import os
import shutil
import subprocess
import tempfile
import time

_TREE_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "bin")
_ENV = {"hccld": "HCCLD_BIN", "hccld-ctl": "HCCLD_CTL"}


def tool(name):
    """The path of hcclD's program `name` (see the module's docstring)."""
    env = os.environ.get(_ENV.get(name, ""))
    if env:
        return env
    here = os.path.normpath(os.path.join(_TREE_BIN, name))
    return here if os.path.exists(here) else shutil.which(name) or name


class Daemon:
    """hccld --foreground on DIR/hccld.sock (admin: DIR/hccld-admin.sock) in a new temporary
    directory (or in `dir`, to start a daemon again on the same sockets), listening for peer
    daemons on `listen`, with hccld's `args` beside, its log on `stderr` (a file object; the
    caller's stderr by default); stop() ends it and removes a DIR it made."""

    def __init__(self, listen="127.0.0.1:0", log_level="error", args=(), dir=None,  # noqa: A002
                 stderr=None):
        self.own_dir = dir is None
        self.dir = tempfile.mkdtemp(prefix="hccld-") if dir is None else dir
        self.sock = os.path.join(self.dir, "hccld.sock")
        self.admin = os.path.join(self.dir, "hccld-admin.sock")
        for stale in (self.sock, self.admin):  # a killed daemon's: wait for the new ones
            if os.path.exists(stale):
                os.unlink(stale)
        self.proc = subprocess.Popen([tool("hccld"), "--socket", self.sock, "--foreground",
                                      "--listen", listen, "--log-level", log_level, *args],
                                     stderr=stderr)
        deadline = time.monotonic() + 10
        while not (os.path.exists(self.sock) and os.path.exists(self.admin)):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"hccld did not start (exit {self.proc.poll()})")
            time.sleep(0.02)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
