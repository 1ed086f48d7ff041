"""Every code block of README.md and docs/*.md runs, as written, from the build tree (as rustdoc
and Python's doctest keep examples true).

Blocks are found with a CommonMark parser (markdown-it). The first word of a fenced block's info
string is its language: `sh`, `c` and `python` run; `text` and `json` (output and file formats
shown) and blocks with no language (diagrams) are not code. A second word marks a block that does
not run here, and says why: `runs-tests` (it is `make test` or part of it), `changes-machine`
(`make install`, systemctl: it would change this machine), `needs-cluster` (nodes of a cluster).
Indented code blocks are refused: each block says what it is.

The blocks of one file run in order in a directory of their own (a session, as a reader's shell
would be: a block may use what an earlier one made), where `build` and `python` lead to this tree,
with HCCLD_SOCKET naming a private daemon unless a block sets its own:
  sh      bash -e -o pipefail; a daemon a block detaches (hccld without --foreground says
          "running in the background, pid N") is stopped afterwards, by that pid;
  c       a whole program as is, else the block is the body of main(), which declares nranks
          (1), rank (0), count (1024) and float send[], recv[]; compiled with
          `pkg-config --cflags --libs hccl` (PKG_CONFIG_PATH=build/lib/pkgconfig: the
          uninstalled package) and run: exit 0 and no ERROR line;
  python  Debian's python3 with PYTHONPATH=python, under `hccl-run -n 2` (the launcher the
          README names), every rank exiting 0.
The test prints how many blocks ran, were skipped and why, and were not code.
"""
import glob
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest

from markdown_it import MarkdownIt

import ranks
from ranks import Daemon

TOP = ranks.TOP
BLOCK_TIMEOUT_S = int(os.environ.get("HCCL_DOC_BLOCK_TIMEOUT_S", "300"))
SKIPS = {
    "runs-tests": "is make test or part of it",
    "changes-machine": "would change this machine (make install, systemctl)",
    "needs-cluster": "needs nodes of a cluster",
}
NOT_CODE = {"text", "json", ""}
C_MAIN = """#include <hccl/hccl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    uint32_t nranks = 1, rank = 0;
    uint64_t count = 1024;
    static float send[1024], recv[1024];
    (void)nranks; (void)rank; (void)count; (void)send; (void)recv;
#line %d "%s"
%s
    return 0;
}
"""
TALLY = {"run": 0, "skipped": {}, "not code": 0}


def doc_files():
    return ["README.md"] + sorted(os.path.relpath(p, TOP)
                                  for p in glob.glob(os.path.join(TOP, "docs", "*.md")))


def blocks(path):
    """(line, language, marker, content) of every code block of path."""
    with open(os.path.join(TOP, path), encoding="utf-8") as f:
        tokens = MarkdownIt("commonmark").parse(f.read())
    for t in tokens:
        if t.type == "code_block":
            yield t.map[0] + 1, None, None, t.content
        elif t.type == "fence":
            words = t.info.split()
            yield (t.map[0] + 1, words[0] if words else "", words[1] if len(words) > 1 else None,
                   t.content)


class Session:
    """One file's directory, private daemon and environment."""

    def __init__(self, path):
        self.path = path
        self.dir = tempfile.mkdtemp(prefix="hccl-doc-")
        for name in ("build", "python"):
            os.symlink(os.path.join(TOP, name), os.path.join(self.dir, name))
        self.daemon = Daemon(listen="none")
        self.env = dict(os.environ, HCCLD_SOCKET=self.daemon.sock, PYTHONPATH="python")
        for var in ("HCCLD_ADMIN_SOCKET", "HCCL_LIB", "MASTER_ADDR", "MASTER_PORT"):
            self.env.pop(var, None)
        self.detached = []

    def close(self):
        ranks.terminate(self.detached)
        self.daemon.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def run(self, cmd, what):
        """Runs cmd in the session (its own process group, ended afterwards); its output. The
        output goes to a file, not a pipe: a daemon the block detaches keeps its stderr."""
        with tempfile.TemporaryFile("w+") as log:
            p = subprocess.Popen(cmd, cwd=self.dir, env=self.env, stdout=log,
                                 stderr=subprocess.STDOUT, text=True, start_new_session=True)
            try:
                p.wait(timeout=BLOCK_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            finally:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # what the block left running in its group
                except ProcessLookupError:
                    pass
            log.seek(0)
            out = log.read()
        self.detached += [int(m) for m in re.findall(r"running in the background, pid (\d+)", out)]
        if p.returncode == -signal.SIGKILL:
            raise AssertionError(f"{what}: still running after {BLOCK_TIMEOUT_S} s:\n{out}")
        if p.returncode != 0:
            raise AssertionError(f"{what}: exit status {p.returncode}:\n{out}")
        return out

    def sh(self, code, what):
        self.run(["bash", "-e", "-o", "pipefail", "-c", code], what)

    def c(self, code, line, what):
        src = os.path.join(self.dir, f"block{line}.c")
        exe = os.path.join(self.dir, f"block{line}")
        with open(src, "w", encoding="utf-8") as f:
            f.write(code if "int main(" in code else C_MAIN % (line, self.path, code))
        self.run(["bash", "-e", "-c", f'cc -Wall -o {exe} {src} '
                  '$(PKG_CONFIG_PATH=build/lib/pkgconfig pkg-config --cflags --libs hccl)'],
                 what + " (compile)")
        out = self.run([exe], what)
        self.assertNoError(out, what)

    def python(self, code, line, what):
        src = os.path.join(self.dir, f"block{line}.py")
        with open(src, "w", encoding="utf-8") as f:
            f.write(code)
        out = self.run(["build/bin/hccl-run", "-n", "2", "--", "/usr/bin/python3", src], what)
        self.assertNoError(out, what)

    @staticmethod
    def assertNoError(out, what):  # noqa: N802 (unittest's style)
        errors = [ln for ln in out.splitlines() if " ERROR " in ln]
        if errors:
            raise AssertionError(f"{what}: logged errors:\n" + "\n".join(errors))


class Docs(unittest.TestCase):
    maxDiff = None

    @classmethod
    def tearDownClass(cls):
        skipped = "; ".join(f"{n} {why}: {', '.join(where)}"
                            for why, (n, where) in
                            ((SKIPS[k], (len(v), v)) for k, v in TALLY["skipped"].items()))
        print(f"\ndoc blocks: {TALLY['run']} run, "
              f"{sum(len(v) for v in TALLY['skipped'].values())} skipped"
              f"{' (' + skipped + ')' if skipped else ''}, {TALLY['not code']} not code "
              "(output, formats, diagrams)", file=sys.stderr)

    def test_every_block_says_what_it_is(self):
        for path in doc_files():
            for line, lang, marker, _ in blocks(path):
                with self.subTest(block=f"{path}:{line}"):
                    self.assertIsNotNone(lang, "an indented block: fence it and name its "
                                               "language (sh, c, python, text, json)")
                    self.assertIn(lang, {"sh", "c", "python"} | NOT_CODE)
                    self.assertTrue(marker is None or marker in SKIPS,
                                    f"unknown marker {marker!r} ({', '.join(SKIPS)})")

    def test_blocks_run(self):
        for path in doc_files():
            runnable = [b for b in blocks(path) if b[1] in ("sh", "c", "python")]
            TALLY["not code"] += sum(1 for b in blocks(path) if b[1] in NOT_CODE)
            if not runnable:
                continue
            session = Session(path)
            try:
                for line, lang, marker, code in runnable:
                    what = f"{path}:{line} ({lang})"
                    if marker in SKIPS:
                        TALLY["skipped"].setdefault(marker, []).append(f"{path}:{line}")
                        continue
                    with self.subTest(block=what):
                        getattr(session, lang)(*((code, what) if lang == "sh"
                                                 else (code, line, what)))
                        TALLY["run"] += 1
            finally:
                session.close()


if __name__ == "__main__":
    unittest.main()
