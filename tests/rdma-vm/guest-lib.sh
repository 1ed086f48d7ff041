# shellcheck shell=bash
# Helpers for scripts that run inside the soft-RoCE guest (selftest-guest.sh, tests/rdma/guest.sh):
# source it.

now() {
    date +%s.%N
}

# Seconds since a now() value, one decimal.
since() {
    awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'
}

# The GID whose address is DEV's IPv4 address as RoCE v2: that is what routes over UDP/IP.
gid_index() {
    local dev=$1 ip=$2 want f i
    # shellcheck disable=SC2086 # split the dotted quad into printf's four arguments
    want=$(printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' ${ip//./ })
    for f in /sys/class/infiniband/"$dev"/ports/1/gids/*; do
        i=${f##*/}
        if [ "$(cat "$f")" = "$want" ] &&
            [ "$(cat "/sys/class/infiniband/$dev/ports/1/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ]; then
            echo "$i"
            return 0
        fi
    done
    return 1
}

# perftest's TCP port 18515 (0x4853) in state LISTEN (0A), read without starting a program.
perftest_listening() {
    local f local_addr st
    for f in /proc/net/tcp /proc/net/tcp6; do
        while read -r _ local_addr _ st _; do
            [[ $local_addr == *:4853 && $st == 0A ]] && return 0
        done <"$f"
    done
    return 1
}
