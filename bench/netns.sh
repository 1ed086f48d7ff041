#!/usr/bin/env bash
# Nodes of their own on one machine, for the benches (sourced; needs root):
#   netns_up PREFIX N RATE   namespace PREFIX-nK (K = 1..N) with eth0 = 10.214.0.K/24 on a veth
#                            whose other end is port pK of bridge br0 in namespace PREFIX-sw;
#                            a tc tbf of RATE (tc's units: 1gbit, 4gbit) on both ends of every
#                            veth, as tests/netns/impair.c does. The addresses exist only there.
#   netns_down PREFIX        removes the namespaces PREFIX-*.
#   netns_ip K               node K's address (10.214.0.K).
#   netns_addr PREFIX K      the address a daemon of node K listens on: netns_ip K, or
#                            127.0.0.1 when PREFIX is empty (no namespaces: loopback).
#   netns_exec PREFIX K CMD  replaces the shell with CMD inside PREFIX-nK (on the host when PREFIX
#                            is empty), HCCL_IF_IP set to netns_addr: call it as a job
#                            (`netns_exec ... &`), whose $! is then CMD's pid.
# Daemons start inside them (ip netns exec PREFIX-nK), their clients stay outside: Unix sockets
# and shared memory cross namespaces.

netns_up() {
    local prefix=$1 n=$2 rate=$3 k
    netns_down "$prefix"
    ip netns add "$prefix-sw"
    ip -n "$prefix-sw" link add br0 type bridge
    ip -n "$prefix-sw" link set br0 up
    for ((k = 1; k <= n; k++)); do
        ip netns add "$prefix-n$k"
        ip -n "$prefix-n$k" link set lo up
        ip -n "$prefix-n$k" link add eth0 type veth peer name "p$k" netns "$prefix-sw"
        ip -n "$prefix-n$k" addr add "$(netns_ip "$k")/24" dev eth0
        ip -n "$prefix-n$k" link set eth0 up
        ip -n "$prefix-sw" link set "p$k" master br0
        ip -n "$prefix-sw" link set "p$k" up
        tc -n "$prefix-n$k" qdisc replace dev eth0 root tbf rate "$rate" burst 512kb latency 20ms
        tc -n "$prefix-sw" qdisc replace dev "p$k" root tbf rate "$rate" burst 512kb latency 20ms
    done
}

netns_down() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep "^$1-" || true); do
        ip netns del "$ns" 2>/dev/null || true
    done
}

netns_ip() {
    echo "10.214.0.$1"
}

netns_addr() {
    if [ -n "$1" ]; then netns_ip "$2"; else echo 127.0.0.1; fi
}

netns_exec() {
    local prefix=$1 k=$2
    shift 2
    HCCL_IF_IP=$(netns_addr "$prefix" "$k")
    export HCCL_IF_IP
    if [ -n "$prefix" ]; then exec ip netns exec "$prefix-n$k" "$@"; fi
    exec "$@"
}
