#!/bin/bash
# make demo: a private hccld in a temp dir, a real 4-rank job (every collective, checked
# element by element), then a second daemon and the same ranks spread over both (as two nodes
# would run them, over TCP on loopback), results printed, daemons stopped.
set -euo pipefail

BUILD=${1:-build}
DIR=$(mktemp -d /tmp/hccld-demo-XXXXXX)
SOCK=$DIR/hccld.sock

SOCK2=$DIR/node2.sock
DAEMONS=()
trap 'kill "${DAEMONS[@]}" 2>/dev/null; wait 2>/dev/null; rm -rf "$DIR"' EXIT

# start_daemon SOCKET: a daemon that also accepts peer daemons on loopback.
start_daemon() {
    "$BUILD/bin/hccld" --socket "$1" --listen 127.0.0.1:0 --foreground --log-level warn &
    DAEMONS+=($!)
    for _ in $(seq 500); do
        [ -S "$1" ] && return 0
        kill -0 $! 2>/dev/null || break
        sleep 0.01
    done
    echo "demo: hccld did not start on $1" >&2
    exit 1
}
start_daemon "$SOCK"

export HCCLD_SOCKET=$SOCK
echo "# hccld $("$BUILD/bin/hccld" --version | cut -d' ' -f2) on $SOCK, 4 ranks on this node"
"$BUILD/bin/hccl_perf_test" -t all -b 8 -e 4M -f 8 -g 4 -n 10 -w 2 -c 1
echo
echo "# the same job through the launcher: hccl-run -n 4 -- hccl_perf_test -t allreduce"
"$BUILD/bin/hccl-run" -n 4 -- "$BUILD/bin/hccl_perf_test" -t allreduce -b 1M -e 16M -f 4 -n 10 -w 2
echo
echo
start_daemon "$SOCK2"
echo "# two daemons (two nodes' worth, on loopback), 2 ranks each: hccl-run --daemons A,B"
"$BUILD/bin/hccl-run" -n 4 --daemons "$SOCK,$SOCK2" -- "$BUILD/bin/hccl_perf_test" -t all \
    -b 8 -e 1M -f 32 -n 5 -w 1 -c 1
echo
"$BUILD/bin/hccld-ctl" --admin-socket "$DIR/hccld-admin.sock" status
