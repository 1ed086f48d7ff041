"""Makes torch_suite_expected.txt from two runs of torch_suite.py at world size 2, one with gloo and
one with hccl (OUT.json files), on the same machine:

    /usr/bin/python3 tests/python/torch_suite_list.py GLOO.json HCCL.json \\
        > tests/python/torch_suite_expected.txt

Every test gloo passes is listed: "pass" (hccl must pass it too), or "skip REASON" where the
suite itself skips it for a backend not named gloo or nccl (the reason names a backend). The
lines after "# world size 4" are kept from the list given as a third argument."""
import json
import re
import sys

# What the suite says when it skips a test for the backend's name, not for this machine.
_GATED = re.compile(r"backend|[Gg]loo|GLOO|[Nn]ccl|NCCL|MPI|get_future is only supported")


def normal(reason):
    """A reason with the items of each {...} sorted: the suite prints Python sets, whose order
    changes from one interpreter to the next."""
    return re.sub(r"\{([^}]*)\}",
                  lambda m: "{" + ", ".join(sorted(x.strip() for x in m.group(1).split(","))) + "}",
                  reason)

HEADER = """\
# torch's distributed test suite (torch.testing._internal.distributed.distributed_test, Debian 12's
# python3-torch 1.13) at world size 2: every test gloo passes on this machine, and what hccl must
# do with it (test_torch_suite.py): "pass", or "skip REASON" where the suite skips it for any
# backend not named gloo or nccl. Made by torch_suite_list.py from a run of each backend.
"""


def main():
    gloo, hccl = (json.load(open(p, encoding="utf-8")) for p in sys.argv[1:3])
    keep = []
    if len(sys.argv) > 3:
        with open(sys.argv[3], encoding="utf-8") as f:
            lines = f.read().split("\n")
        if "# world size 4" in lines:
            keep = [x for x in lines[lines.index("# world size 4"):] if x]
    out = [HEADER.rstrip("\n")]
    for name, (outcome, _) in sorted(gloo.items()):
        if outcome != "pass":
            continue
        got, reason = hccl.get(name, ["missing", ""])
        reason = normal(reason)
        if got == "skip" and _GATED.search(reason):
            out.append(f"{name} skip {reason}")
        else:
            out.append(f"{name} pass")
    print("\n".join(out + keep))


if __name__ == "__main__":
    main()
