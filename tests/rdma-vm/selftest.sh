#!/bin/bash
# Checks the soft-RoCE guest itself: boots it through run.sh and runs selftest-guest.sh
# there (ibv_devices, rping across rxe1 -> rxe0, ib_write_bw rxe1 -> rxe0 with 1 MiB writes),
# then prints the timings. Exit 0 only if every check passed; 125 if the guest never ran them.
# Options (--cache DIR, --timeout SECS) go to run.sh.
set -euo pipefail

HERE=$(cd "${BASH_SOURCE[0]%/*}" && pwd)
out=$(mktemp)
trap 'rm -f "$out"' EXIT

elapsed() {
    echo "$(date +%s.%N) $start" | awk '{ printf "%.1f", $1 - $2 }'
}

# Copies the output to the terminal and to $out, and notes when the guest said it was ready:
# the boot time as the host sees it (QEMU start, firmware and kernel load included).
watch_output() {
    local line
    while IFS= read -r line; do
        printf '%s\n' "$line"
        printf '%s\n' "$line" >>"$out"
        case $line in
        "HCCLD-VM: "*" ACTIVE at uptime "*) echo "host_ready $(elapsed)" >>"$out" ;;
        esac
    done
}

start=$(date +%s.%N)
rc=0
"$HERE/run.sh" "$@" -- "$HERE/selftest-guest.sh" 2>&1 | watch_output || rc=${PIPESTATUS[0]}
total=$(elapsed)

# The console ends lines with CR LF.
summary() {
    tr -d '\r' <"$out" | sed -n "$1" | tail -n 1
}
boot=$(summary 's/^HCCLD-VM: .* ACTIVE at uptime \([0-9.]*\) s$/\1/p')
host_ready=$(summary 's/^host_ready \([0-9.]*\)$/\1/p')
rping=$(summary 's/^selftest: [A-Z]* rping (\([0-9.]*\) s)$/\1/p')
bw_time=$(summary 's/^selftest: [A-Z]* ib_write_bw (\([0-9.]*\) s)$/\1/p')
bw=$(summary 's/^selftest: ib_write_bw \(.*\)$/\1/p')
result=$(summary 's/^selftest: \([0-9]* passed, [0-9]* failed\)$/\1/p')

echo "rdma-vm selftest: rxe0/rxe1 ACTIVE ${host_ready:-?} s after start (guest uptime ${boot:-?} s);" \
    "rping ${rping:-?} s; ib_write_bw ${bw_time:-?} s (${bw:-no result}); total ${total} s"
if [ "$rc" -eq 0 ]; then
    echo "rdma-vm selftest: ${result:-?}: OK"
elif [ "$rc" -eq 125 ]; then
    echo "rdma-vm selftest: FAILED: the guest did not run the checks (see run.sh's message above)"
else
    echo "rdma-vm selftest: FAILED (${result:-exit $rc})"
fi
exit "$rc"
