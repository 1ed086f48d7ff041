#!/bin/bash
# Runs the RDMA transport's test binary inside the soft-RoCE guest and exits with its code.
# Builds nothing.
#   tests/rdma/run.sh [--bench BENCH_BIN [--mib N]] [--daemons BUILD] [--timeout SECS] TEST_BIN
# With --bench, the same guest run also measures the transport (BENCH_BIN, N MiB rxe1 -> rxe0
# in 1 MiB messages, default 128) and ib_write_bw -s 1048576 on the same rxe pair. With
# --daemons, two of BUILD's hccld, one per device, then run checked collectives over RDMA
# (daemons-guest.sh).
# Exit 125 (and a FAILED banner) means the guest never ran the tests: a boot or harness
# failure, not a test result. Waits while another guest (any qemu-system process) runs: one
# guest at a time on this machine, and never one that this script did not start is touched.
set -euo pipefail

HERE=$(cd "${BASH_SOURCE[0]%/*}" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

usage() {
    echo "usage: $0 [--bench BENCH_BIN [--mib N]] [--daemons BUILD] [--timeout SECS] TEST_BIN" >&2
    exit 2
}

bench=""
mib=128
timeout_s=900
while [ $# -gt 1 ]; do
    case $1 in
    --bench) bench=$(realpath "$2") && shift 2 ;;
    --mib) mib=$2 && shift 2 ;;
    --daemons) HCCLD_RDMA_DAEMONS=$(realpath "$2") && export HCCLD_RDMA_DAEMONS && shift 2 ;;
    --timeout) timeout_s=$2 && shift 2 ;;
    *) usage ;;
    esac
done
[ $# -eq 1 ] || usage
test_bin=$(realpath "$1")
[ -x "$test_bin" ] || {
    echo "tests/rdma/run.sh: $test_bin is not an executable (build it first)" >&2
    exit 2
}

# Another engineer's guest may be running: wait for it, never start a second one.
waited=0
while pgrep -f qemu-system >/dev/null; do
    if [ $((waited % 60)) -eq 0 ]; then
        echo "tests/rdma/run.sh: a qemu-system process is running; waiting (${waited} s so far)" >&2
    fi
    sleep 5
    waited=$((waited + 5))
    if [ "$waited" -ge "${HCCLD_RDMA_WAIT_S:-3600}" ]; then
        echo "tests/rdma/run.sh: FAILED: another guest still runs after $waited s" >&2
        exit 125
    fi
done

rc=0
"$ROOT/tests/rdma-vm/run.sh" --timeout "$timeout_s" -- \
    "$HERE/guest.sh" "$test_bin" ${bench:+"$bench"} ${bench:+"$mib"} || rc=$?
if [ "$rc" -eq 125 ]; then
    {
        echo "tests/rdma/run.sh: ============================================================"
        echo "tests/rdma/run.sh: FAILED: the guest could not boot or never reported (exit 125)."
        echo "tests/rdma/run.sh: No RDMA test ran. See tests/rdma-vm/run.sh's output above."
        echo "tests/rdma/run.sh: ============================================================"
    } >&2
fi
exit "$rc"
