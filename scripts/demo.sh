#!/bin/bash
# make demo: a private hccld in a temp dir, a real 4-rank job (every collective, checked
# element by element), results printed, daemon stopped.
set -euo pipefail

BUILD=${1:-build}
DIR=$(mktemp -d /tmp/hccld-demo-XXXXXX)
SOCK=$DIR/hccld.sock

"$BUILD/bin/hccld" --socket "$SOCK" --listen 127.0.0.1:0 --foreground --log-level warn &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null; rm -rf "$DIR"' EXIT
for _ in $(seq 500); do
    [ -S "$SOCK" ] && break
    kill -0 $DAEMON 2>/dev/null || { echo "demo: hccld did not start" >&2; exit 1; }
    sleep 0.01
done

export HCCLD_SOCKET=$SOCK
echo "# hccld $("$BUILD/bin/hccld" --version | cut -d' ' -f2) on $SOCK, 4 ranks on this node"
"$BUILD/bin/hccl_perf_test" -t all -b 8 -e 4M -f 8 -g 4 -n 10 -w 2 -c 1
echo
echo "# the same job through the launcher: hccl-run -n 4 -- hccl_perf_test -t allreduce"
"$BUILD/bin/hccl-run" -n 4 -- "$BUILD/bin/hccl_perf_test" -t allreduce -b 1M -e 16M -f 4 -n 10 -w 2
echo
"$BUILD/bin/hccld-ctl" --admin-socket "$DIR/hccld-admin.sock" status
