#!/bin/bash
# The guest half of tests/rdma/run.sh: runs inside the soft-RoCE guest (tests/rdma-vm/run.sh).
#   guest.sh TEST_BIN [BENCH_BIN [BENCH_MIB]]
# Runs the RDMA transport's test binary; with BENCH_BIN also its bench (rxe1 -> rxe0, 1 MiB
# messages) and ib_write_bw -s 1048576 on the same pair, and prints both and their ratio.
# With HCCLD_RDMA_DAEMONS=BUILD (run.sh --daemons BUILD), then daemons-guest.sh BUILD.
# Exits with the test binary's code, or 1 if it passed but the bench or the daemons failed.
set -uo pipefail

[ "${HCCLD_VM:-}" = 1 ] || {
    echo "guest.sh: run me through tests/rdma/run.sh" >&2
    exit 2
}
[ $# -ge 1 ] || {
    echo "usage: guest.sh TEST_BIN [BENCH_BIN [BENCH_MIB]]" >&2
    exit 2
}

TEST_BIN=$1
BENCH_BIN=${2:-}
BENCH_MIB=${3:-128}
ADDR0=10.77.0.1
ADDR1=10.77.0.2
MSG=1048576
work=$(mktemp -d)
bg_pid=""

# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    [ -z "$bg_pid" ] || kill "$bg_pid" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=tests/rdma-vm/guest-lib.sh
. "$(dirname "$0")/../rdma-vm/guest-lib.sh"

# Prints ib_write_bw's average in MiB/s (perftest's "MB/sec") for 1 MiB writes rxe1 -> rxe0
# (200 of them); MiB/s keeps two decimals where --report_gbits would round to 0.17 Gb/s.
write_bw() {
    local g0 g1 deadline opts
    if ! g0=$(gid_index rxe0 "$ADDR0") || ! g1=$(gid_index rxe1 "$ADDR1"); then
        echo "guest.sh: no RoCE v2 GIDs for $ADDR0/$ADDR1" >&2
        return 1
    fi
    opts=(-s "$MSG" -n 200 -F)
    timeout 300 ib_write_bw -d rxe0 -x "$g0" "${opts[@]}" >"$work/bw-server.log" 2>&1 &
    bg_pid=$!
    deadline=$((SECONDS + 30))
    until perftest_listening; do
        if [ "$SECONDS" -ge "$deadline" ] || ! kill -0 "$bg_pid" 2>/dev/null; then
            echo "guest.sh: ib_write_bw server not ready" >&2
            return 1
        fi
        sleep 0.1
    done
    timeout 300 ib_write_bw -d rxe1 -x "$g1" "${opts[@]}" "$ADDR0" >"$work/bw-client.log" 2>&1 || {
        cat "$work/bw-client.log" "$work/bw-server.log" >&2
        return 1
    }
    wait "$bg_pid" || true
    bg_pid=""
    # The result row: bytes, iterations, peak, average (MiB/s), message rate (Mpps).
    awk -v m="$MSG" '$1 == m && NF >= 5 { print "guest.sh: ib_write_bw result row:", $0 }' \
        "$work/bw-client.log" >&2
    awk -v m="$MSG" '$1 == m && NF >= 5 && $4 > 0 { print $4 }' "$work/bw-client.log" | grep . || {
        echo "guest.sh: no positive average in ib_write_bw's output:" >&2
        cat "$work/bw-client.log" >&2
        return 1
    }
}

t0=$(now)
"$TEST_BIN"
rc=$?
echo "guest.sh: $TEST_BIN exited $rc after $(since "$t0") s"

if [ -n "$BENCH_BIN" ]; then
    t0=$(now)
    if ! bench=$("$BENCH_BIN" "$BENCH_MIB" "$MSG" 8); then
        echo "guest.sh: FAIL $BENCH_BIN" >&2
        [ "$rc" -ne 0 ] || rc=1
    fi
    echo "$bench"
    echo "guest.sh: bench took $(since "$t0") s"
    t0=$(now)
    if mibs=$(write_bw); then
        echo "guest.sh: ib_write_bw -s $MSG rxe1 -> rxe0: $mibs MiB/s ($(since "$t0") s)"
        ours=$(sed -n 's/.*, \([0-9.]*\) GB\/s.*/\1/p' <<<"$bench")
        if [ -n "$ours" ]; then
            awk -v o="$ours" -v m="$mibs" 'BEGIN { g = m * 1048576 / 1e9
                printf "guest.sh: RDMA transport %.4f GB/s vs ib_write_bw %.4f GB/s: ratio %.2f\n",
                    o, g, o / g }'
        fi
    else
        echo "guest.sh: ib_write_bw failed" >&2
    fi
fi
# tests/rdma/run.sh --daemons BUILD: two daemons on the two devices run checked collectives.
if [ -n "${HCCLD_RDMA_DAEMONS:-}" ]; then
    t0=$(now)
    "$(dirname "$0")/daemons-guest.sh" "$HCCLD_RDMA_DAEMONS" || { [ "$rc" -ne 0 ] || rc=1; }
    echo "guest.sh: daemons over RDMA took $(since "$t0") s"
fi
exit "$rc"
