#!/bin/bash
# The guest half of selftest.sh: runs inside the soft-RoCE guest (through run.sh) and checks
# that rxe0 and rxe1 exist, that rdma_cm connects across them (rping) and that RDMA writes
# move data from rxe1 to rxe0 (ib_write_bw). Every check also reads the devices' packet
# counters, so traffic that stayed inside one device (rxe loopback) does not pass.
set -euo pipefail

[ "${HCCLD_VM:-}" = 1 ] || {
    echo "selftest-guest.sh: run me through tests/rdma-vm/selftest.sh" >&2
    exit 2
}

ADDR0=10.77.0.1
ADDR1=10.77.0.2
MSG=1048576
ITERS=200
passed=0
failed=0
work=$(mktemp -d)
bg_pids=()

cleanup() {
    local p
    for p in "${bg_pids[@]}"; do
        kill "$p" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=tests/rdma-vm/guest-lib.sh
. "$(dirname "$0")/guest-lib.sh"

counter() {
    cat "/sys/class/infiniband/$1/ports/1/hw_counters/$2"
}

# Polls CHECK (a command) until it succeeds, for up to SECS seconds while process PID lives:
# the servers here show readiness only as state (a listening cm_id or socket). $SECONDS, not
# a count of tries: one try may start a host program, which takes a while under emulation.
wait_ready() {
    local secs=$1 what=$2 pid=$3 deadline=$((SECONDS + $1))
    shift 3
    while [ "$SECONDS" -lt "$deadline" ]; do
        "$@" && return 0
        kill -0 "$pid" 2>/dev/null || {
            echo "selftest: $what exited before it was ready" >&2
            return 1
        }
        sleep 0.1
    done
    echo "selftest: $what not ready after $secs s" >&2
    return 1
}

# Waits for a server after its client ran; a failed client leaves nothing to wait for.
finish_server() {
    local pid=$1 client_rc=$2 rc=0
    [ "$client_rc" -eq 0 ] || kill "$pid" 2>/dev/null || true
    wait "$pid" || rc=$?
    return $((client_rc ? client_rc : rc))
}

record() {
    local name=$1 rc=$2 t0=$3
    if [ "$rc" -eq 0 ]; then
        passed=$((passed + 1))
        echo "selftest: PASS $name ($(since "$t0") s)"
    else
        failed=$((failed + 1))
        echo "selftest: FAIL $name ($(since "$t0") s)"
    fi
}

check_devices() {
    local out
    out=$(ibv_devices) || return 1
    echo "$out"
    if ! grep -qw rxe0 <<<"$out" || ! grep -qw rxe1 <<<"$out"; then
        echo "selftest: ibv_devices does not list both rxe0 and rxe1" >&2
        return 1
    fi
    if ! GID0=$(gid_index rxe0 "$ADDR0") || ! GID1=$(gid_index rxe1 "$ADDR1"); then
        echo "selftest: no RoCE v2 GID for $ADDR0 on rxe0 or $ADDR1 on rxe1" >&2
        return 1
    fi
    echo "selftest: RoCE v2 IPv4 GID index: rxe0 $GID0 ($ADDR0), rxe1 $GID1 ($ADDR1)"
}

# Checks that rxe1 sent and rxe0 received at least MIN packets since the counts in $1 $2.
crossed() {
    local sent0=$1 rcvd0=$2 min=$3 sent rcvd
    sent=$(($(counter rxe1 sent_pkts) - sent0))
    rcvd=$(($(counter rxe0 rcvd_pkts) - rcvd0))
    echo "selftest: rxe1 sent $sent packets, rxe0 received $rcvd"
    if [ "$sent" -lt "$min" ] || [ "$rcvd" -lt "$min" ]; then
        echo "selftest: expected at least $min packets from rxe1 to rxe0" >&2
        return 1
    fi
}

cm_listening() {
    rdma res show cm_id 2>/dev/null | grep -q "state LISTEN .*src-addr $ADDR0:7174 "
}

check_rping() {
    local sent0 rcvd0 spid rc=0
    sent0=$(counter rxe1 sent_pkts)
    rcvd0=$(counter rxe0 rcvd_pkts)
    timeout 60 rping -s -a "$ADDR0" -v -C 3 >"$work/rping-server.log" 2>&1 &
    spid=$!
    bg_pids+=("$spid")
    wait_ready 30 "rping server" "$spid" cm_listening || rc=1
    # -I binds the client to 10.77.0.2, hence rxe1; without it rdma_cm would pick rxe0, the
    # device that owns the server's address, and never touch the wire.
    [ "$rc" -ne 0 ] || timeout 60 rping -c -I "$ADDR1" -a "$ADDR0" -v -C 3 || rc=$?
    finish_server "$spid" "$rc" || rc=$?
    sed 's/^/rping server: /' "$work/rping-server.log"
    [ "$rc" -eq 0 ] || {
        echo "selftest: rping exited $rc" >&2
        return 1
    }
    crossed "$sent0" "$rcvd0" 6
}

check_write_bw() {
    local sent0 rcvd0 spid rc=0 opts
    sent0=$(counter rxe1 sent_pkts)
    rcvd0=$(counter rxe0 rcvd_pkts)
    opts=(-s "$MSG" -n "$ITERS" -F --report_gbits)
    timeout 300 ib_write_bw -d rxe0 -x "$GID0" "${opts[@]}" >"$work/bw-server.log" 2>&1 &
    spid=$!
    bg_pids+=("$spid")
    wait_ready 30 "ib_write_bw server" "$spid" perftest_listening || rc=1
    if [ "$rc" -eq 0 ]; then
        timeout 300 ib_write_bw -d rxe1 -x "$GID1" "${opts[@]}" "$ADDR0" |
            tee "$work/bw-client.log" || rc=$?
    fi
    finish_server "$spid" "$rc" || rc=$?
    [ "$rc" -eq 0 ] || {
        sed 's/^/ib_write_bw server: /' "$work/bw-server.log"
        echo "selftest: ib_write_bw exited $rc" >&2
        return 1
    }
    # The result row: bytes, iterations, peak, average (Gb/s), message rate (Mpps).
    awk -v m="$MSG" '$1 == m && NF >= 5 {
        printf "selftest: ib_write_bw %d x %d B: average %s Gb/s (%.0f MB/s), peak %s Gb/s\n",
            $2, $1, $4, $4 * 1000 / 8, $3 }' "$work/bw-client.log" | grep . || {
        echo "selftest: no bandwidth line in ib_write_bw's output" >&2
        return 1
    }
    # Each 1 MiB write is at least MSG / 4096 packets (the largest RoCE MTU).
    crossed "$sent0" "$rcvd0" $((ITERS * MSG / 4096))
}

t0=$(now)
rc=0
check_devices || rc=$?
record ibv_devices "$rc" "$t0"
if [ "$rc" -eq 0 ]; then
    t0=$(now)
    rc=0
    check_rping || rc=$?
    record rping "$rc" "$t0"
    t0=$(now)
    rc=0
    check_write_bw || rc=$?
    record ib_write_bw "$rc" "$t0"
else
    failed=$((failed + 2))
    echo "selftest: FAIL rping, ib_write_bw (not run: no devices)"
fi
echo "selftest: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
