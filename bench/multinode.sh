#!/usr/bin/env bash
# hcclD across daemons, on one machine: several private daemons on loopback stand for several
# nodes (one rank each unless said otherwise). Three parts:
#
#   bw    allreduce fp32 sum, 4 daemons x 1 rank, 1 MiB..256 MiB: hcclD's bus bandwidth
#         (malloc buffers and -z) against Open MPI over TCP on lo (btl self,tcp), and the
#         loopback limit measured in the same run: 4 iperf3 streams at once, mean per stream.
#   sel   level-1 selection: allreduce and allgather on 4 and 8 daemons x 1 rank, the cost
#         model's choice against every forced algorithm (HCCL_ALGO=level0:NA;level1:NAME with
#         NAME in ring, H-D_R, fullmesh, tree, NB, NHR); per size best_forced_time / auto_time (1.00:
#         as fast as the best forced one), the best one and the one the daemon chose (its
#         INFO log: "allreduce of ~B bytes per block on N daemons: ALGO (predicted ...)" or
#         "comm C seq S: allreduce, B B per node, N nodes: ALGO (predicted: ...)"; "-" when
#         not found), and best_forced_time / the chosen algorithm's own forced time (the
#         choice judged without the spread between an auto run and a forced run of the same
#         algorithm). One hccl_perf_test -A run per round times all variants on one set of
#         daemons, each in a comm of its own (split off the world comm under its HCCL_ALGO),
#         their iterations interleaved, each after a barrier, out of place.
#   selns the same selection sweep on 4 daemons, each in a network namespace of its own with
#         a veth to a bridge and a 1 Gbit/s tc tbf on both ends of every veth (needs root;
#         the namespaces are created here and removed at exit; addresses 10.214.0.x only
#         exist inside them). The clients stay in this namespace: Unix sockets cross.
#   hier  hierarchy: 2 daemons x 2 ranks, allreduce of 16 MiB: payload bytes each daemon sent
#         to its peers (hccld-ctl status --json, net_tx_bytes) per op, next to a node-level
#         ring's 2(n-1)/n x size and a per-rank ring's 2 ranks x 2(4-1)/4 x size.
#
#   bench/multinode.sh [BUILD]      (default build; `make bench-multinode` runs it)
#
# Needs mpicc.openmpi, mpirun.openmpi and iperf3 (HCCLD_DEPS_BENCH=1 scripts/install-deps.sh)
# and python3 or jq. Raw outputs (benchmark outputs, daemon logs, iperf3 JSON, status JSON,
# summary.txt) go to BUILD/bench/multinode/. Bandwidths are out of place, as in bench/run.sh;
# so are selection times.
#
# Environment (defaults in brackets; about 26 minutes in all on a 2-core machine: bw and hier
# 9, sel 10, selns 7):
#   BENCH_PARTS            parts to run, any of "bw sel selns hier" [bw sel selns hier]
#   BENCH_ITERS            bw: timed iterations per size from BENCH_BW_SPLIT on [5]
#   BENCH_BW_SPLIT         bw: sizes below it run BENCH_BW_SMALL_ITERS timed iterations after
#                          BENCH_BW_SMALL_WARMUP, in a run of their own [32M]; at 5 iterations
#                          after 1 warm-up a 1 MiB size was one 15 ms sample, which one hiccup
#                          of this machine could halve, and hcclD's first ops at a new size
#                          (several times slower than the next ones) weighed in; nccl-tests
#                          takes 20 after 5 (the same counts for every contender)
#   BENCH_BW_SMALL_ITERS, BENCH_BW_SMALL_WARMUP [40, 5]
#   BENCH_WARMUP           bw: warm-up iterations per size from BENCH_BW_SPLIT on [1]
#   BENCH_BW_MAX           bw: largest size [256M]
#   BENCH_BW_ROUNDS        bw: hcclD, hcclD-z and Open MPI take turns this many times; each
#                          cell is the median of its rounds [3]
#   BENCH_IPERF_SECS       bw: seconds each iperf3 stream runs [5]
#   BENCH_IPERF_PORT       bw: first port tried for the iperf3 servers [5301]
#   BENCH_SEL_ITERS        sel: timed iterations of each variant for sizes >= BENCH_SEL_SPLIT [11]
#   BENCH_SEL_SMALL_ITERS  sel: the same for smaller sizes (cheap) [101]; two comms of the
#                          same algorithm in one run differ by up to 10% at 41 iterations
#                          and by up to 7% at 201
#   BENCH_SEL_WARMUP       sel: warm-up iterations per size and variant [3]; a time is the
#                          variant's median iteration: on this machine two runs of one
#                          algorithm differed by 10-30% when each variant ran in a process
#                          of its own and was timed by its mean (one 5 ms stall in 20
#                          iterations of 400 us adds 250 us); interleaved iterations share
#                          the load, a median is what the algorithm controls, and the first
#                          ops at a new size (slower, see BENCH_BW_SPLIT) stay out
#   BENCH_SEL_SPLIT        sel: see above [1M]
#   BENCH_SEL_MIN, BENCH_SEL_MAX, BENCH_SEL_FACTOR
#                          sel: sizes MIN, MIN*F, ... up to MAX [8, 64M, 4]; with the
#                          defaults the last size is 32 MiB (8 x 4^11): BENCH_SEL_FACTOR=2
#                          reaches 64 MiB at about twice the time
#   BENCH_SEL_DAEMONS      sel: daemon counts [4 8]
#   BENCH_SEL_ALGOS        sel: the forced algorithms [ring H-D_R fullmesh tree NB NHR]
#   BENCH_SEL_COLLS        sel: the collectives [allreduce allgather]
#   BENCH_SEL_ROUNDS       sel: -A runs per case and size range; each time is the median of
#                          its rounds [3] (one bad run stays out)
#   BENCH_SELNS_RATE       selns: the tbf rate of every veth end [1gbit]
#   BENCH_HIER_ITERS, BENCH_HIER_WARMUP
#                          hier: iterations and warm-up of the 16 MiB allreduce [5, 1]
#   BENCH_TIMEOUT          any run taking longer (s) is killed and fails [900]
#   BENCH_STALL            a bw or hier run printing nothing for this long (s) is killed and
#                          fails [180] (one 256 MiB Open MPI size takes ~1 min when loaded)
#   BENCH_SEL_STALL        the same for sel runs [60]
#
# A failed run (non-zero exit, wrong results, killed as hung) leaves its cells "-" (cells
# whose results were wrong read "wrong"); the other runs go ahead and the script exits 1 at
# the end.
set -euo pipefail
# shellcheck source=bench/netns.sh
. "$(dirname "$0")/netns.sh"

BUILD=${1:-build}
PARTS=${BENCH_PARTS:-bw sel selns hier}
ITERS=${BENCH_ITERS:-5}
WARMUP=${BENCH_WARMUP:-1}
BW_MIN=1M
BW_SPLIT=${BENCH_BW_SPLIT:-32M}
BW_SMALL_ITERS=${BENCH_BW_SMALL_ITERS:-40}
BW_SMALL_WARMUP=${BENCH_BW_SMALL_WARMUP:-5}
BW_MAX=${BENCH_BW_MAX:-256M}
BW_DAEMONS=4
BW_ROUNDS=${BENCH_BW_ROUNDS:-3}
IPERF_SECS=${BENCH_IPERF_SECS:-5}
IPERF_PORT=${BENCH_IPERF_PORT:-5301}
IPERF_STREAMS=4
SEL_ITERS=${BENCH_SEL_ITERS:-11}
SEL_SMALL_ITERS=${BENCH_SEL_SMALL_ITERS:-101}
SEL_WARMUP=${BENCH_SEL_WARMUP:-3}
SEL_ROUNDS=${BENCH_SEL_ROUNDS:-3}
SEL_SPLIT=${BENCH_SEL_SPLIT:-1M}
SEL_MIN=${BENCH_SEL_MIN:-8}
SEL_MAX=${BENCH_SEL_MAX:-64M}
SEL_FACTOR=${BENCH_SEL_FACTOR:-4}
SEL_DAEMONS=${BENCH_SEL_DAEMONS:-4 8}
SEL_COLLS=${BENCH_SEL_COLLS:-allreduce allgather}
SEL_ALGOS=${BENCH_SEL_ALGOS:-ring H-D_R fullmesh tree NB NHR}
SELNS_RATE=${BENCH_SELNS_RATE:-1gbit}
SELNS_DAEMONS=4
# selns: namespace names (this script's pid keeps parallel runs apart) and whether the
# daemons start inside them.
NS=hcb$$
NETNS=0
HIER_ITERS=${BENCH_HIER_ITERS:-5}
HIER_WARMUP=${BENCH_HIER_WARMUP:-1}
HIER_BYTES=16M
TIMEOUT=${BENCH_TIMEOUT:-900}
STALL=${BENCH_STALL:-180}
SEL_STALL=${BENCH_SEL_STALL:-60}
# Piece size of a communicator spanning daemons (daemon/server/jobs.c, send_multinode_resp):
# the library cuts each op into pieces of CHUNK / (4 B x blocks) elements (libclient/coll.c,
# hc_plan) and the daemon picks an algorithm per piece size, so this tells which of the
# daemon's log lines belongs to which size.
CHUNK=$((2 << 20)) # MEDIUM's chunk_kib (hccl_perf_test's comms are of the default class)

SRC_DIR=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "$BUILD" && pwd)
RES=$BUILD/bench/multinode
PERF=$BUILD/bin/hccl_perf_test
HCCLD=$BUILD/bin/hccld
RUN=$BUILD/bin/hccl-run
CTL=$BUILD/bin/hccld-ctl
failures=0

die() {
    echo "bench: $*" >&2
    exit 1
}

for tool in "$PERF" "$HCCLD" "$RUN" "$CTL"; do
    [ -x "$tool" ] || die "$tool is missing: run make first"
done
for cmd in mpicc.openmpi mpirun.openmpi iperf3; do
    command -v "$cmd" >/dev/null ||
        die "$cmd not found (run HCCLD_DEPS_BENCH=1 scripts/install-deps.sh)"
done
if command -v jq >/dev/null; then
    JSON=jq
elif command -v python3 >/dev/null; then
    JSON=python3
else
    die "neither jq nor python3 found: one is needed to read JSON"
fi
for part in $PARTS; do
    case $part in
    bw | sel | hier) ;;
    selns) [ "$(id -u)" = 0 ] || die "part selns needs root (network namespaces)" ;;
    *) die "unknown part '$part' in BENCH_PARTS (bw, sel, selns, hier)" ;;
    esac
done
# The daemon's choice must be the cost model's, not one inherited from the caller.
unset HCCL_ALGO

# bytes SIZE: SIZE with an optional K/M/G suffix (powers of 1024), in bytes.
bytes() {
    local v=$1 m=1
    case $v in
    *[kK]) m=1024 ;;
    *[mM]) m=$((1 << 20)) ;;
    *[gG]) m=$((1 << 30)) ;;
    esac
    v=${v%[kKmMgG]}
    [[ $v =~ ^[0-9]+$ ]] || die "bad size '$1'"
    echo $((v * m))
}

# json_get FILE KEY.KEY...: one value of a JSON file, empty when missing.
json_get() {
    if [ "$JSON" = jq ]; then
        jq -r ".$2 // empty" "$1" 2>/dev/null || true
    else
        python3 - "$1" "$2" <<'EOF' 2>/dev/null || true
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[k]
print(v)
EOF
    fi
}

mkdir -p "$RES"
rm -f "$RES"/*.txt "$RES"/*.err "$RES"/*.log "$RES"/*.json

TMP=$(mktemp -d /tmp/hccld-multinode.XXXXXX)
DAEMON_PIDS=()
DAEMON_DIRS=()
IPERF_PIDS=()
CUR_PID=
RUN_OK=0
SOCKS=
ndaemon_sets=0

stop_pid() {
    local pid=$1
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    fi
}

stop_daemons() {
    local pid
    for pid in "${DAEMON_PIDS[@]}"; do
        stop_pid "$pid"
    done
    DAEMON_PIDS=()
    DAEMON_DIRS=()
    SOCKS=
}

cleanup() {
    local pid
    [ -z "$CUR_PID" ] || stop_pid "$CUR_PID"
    stop_daemons
    for pid in "${IPERF_PIDS[@]}"; do
        stop_pid "$pid"
    done
    netns_down "$NS"
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_daemons NAME N LEVEL: N private daemons on loopback (with NETNS=1: one in each node
# namespace of netns_up), each in its own directory, logs
# appended to NAME.hccldI.log; sets SOCKS (comma-separated, for hccl-run --daemons) and
# DAEMON_DIRS. Stops the daemons started before.
start_daemons() {
    local name=$1 n=$2 level=$3 i dir sock ns=
    stop_daemons
    ndaemon_sets=$((ndaemon_sets + 1))
    if [ "$NETNS" = 1 ]; then ns=$NS; fi
    for ((i = 0; i < n; i++)); do
        dir=$TMP/s$ndaemon_sets/d$i
        mkdir -p "$dir"
        netns_exec "$ns" $((i + 1)) "$HCCLD" --socket "$dir/hccld.sock" \
            --listen "$(netns_addr "$ns" $((i + 1))):0" --foreground --log-level "$level" \
            >>"$RES/$name.hccld$i.log" 2>&1 &
        DAEMON_PIDS+=("$!")
        DAEMON_DIRS+=("$dir")
        SOCKS+=${SOCKS:+,}$dir/hccld.sock
    done
    for ((i = 0; i < n; i++)); do
        sock=${DAEMON_DIRS[$i]}/hccld.sock
        for _ in $(seq 100); do
            [ -S "$sock" ] && break
            kill -0 "${DAEMON_PIDS[$i]}" 2>/dev/null || break
            sleep 0.1
        done
        if ! [ -S "$sock" ]; then
            echo "bench: $name: daemon $i did not start (see $RES/$name.hccld$i.log)" >&2
            return 1
        fi
    done
}

# stop_run PID: TERM (hccl-run and mpirun pass it on to their ranks), KILL 5 s later.
stop_run() {
    local pid=$1
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# run NAME CMD...: runs one benchmark, keeping stdout and stderr under multinode/. A run
# that prints nothing for STALL s or lasts over TIMEOUT s is killed. A failed run is
# reported (RUN_OK=0) and leaves its cells "-"; the other runs still go ahead.
run() {
    local name=$1
    shift
    local out=$RES/$name.txt err=$RES/$name.err start=$SECONDS why='' rc=0 now
    "$@" >"$out" 2>"$err" &
    CUR_PID=$!
    while kill -0 "$CUR_PID" 2>/dev/null; do
        sleep 0.5
        now=$(date +%s)
        if [ $((now - $(stat -c %Y "$out"))) -ge "$STALL" ]; then
            why="printed nothing for $STALL s"
        elif [ $((SECONDS - start)) -ge "$TIMEOUT" ]; then
            why="ran over $TIMEOUT s"
        fi
        if [ -n "$why" ]; then
            stop_run "$CUR_PID"
            break
        fi
    done
    wait "$CUR_PID" || rc=$?
    CUR_PID=
    RUN_OK=0
    if [ -n "$why" ]; then
        echo "bench: $name FAILED: killed, $why (see $err)" >&2
        echo "bench: killed: $why" >>"$err"
        failures=$((failures + 1))
    elif [ "$rc" -ne 0 ]; then
        echo "bench: $name FAILED (exit $rc), see $err" >&2
        failures=$((failures + 1))
    else
        echo "bench: $name done in $((SECONDS - start)) s"
        RUN_OK=1
    fi
}

# run_on NAME NDAEMONS NRANKS ENV ARGS...: fresh daemons, one hccl-run of hccl_perf_test ARGS
# on them with ENV ("" or one VAR=VALUE) added to the environment, daemons stopped again.
run_on() {
    local name=$1 nd=$2 nr=$3 envvar=$4
    shift 4
    if start_daemons "$name" "$nd" warn; then
        run "$name" env ${envvar:+"$envvar"} "$RUN" -n "$nr" --daemons "$SOCKS" -- "$PERF" "$@"
    else
        failures=$((failures + 1))
    fi
    stop_daemons
}

ratio() {
    awk -v a="$1" -v b="$2" 'BEGIN {
        if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b + 0 == 0) print "-"
        else printf "%.2f\n", a / b }'
}

# extract COLUMN FILE...: "COLUMN size busbw time_us count ip_time_us" for each data row
# (out of place; "-" for what a file lacks), "wrong" for busbw and times when the row's check
# failed. hccl_perf_test rows: size count type redop root time algbw busbw #wrong (out of
# place), then time algbw busbw #wrong in place; mpi_allreduce rows: size time_us algbw busbw
# [# N wrong].
extract() {
    local col=$1 file
    shift
    for file in "$@"; do
        [ -s "$file" ] || continue
        awk -v col="$col" '
            /^#/ || NF < 4 { next }
            NF >= 9 {
                bad = ($9 != "N/A" && $9 + 0 != 0) || (NF >= 13 && $13 != "N/A" && $13 + 0 != 0)
                print col, $1, bad ? "wrong" : $8, bad ? "wrong" : $6, $2,
                    bad ? "wrong" : (NF >= 13 ? $10 : "-"); next }
            /wrong/ { print col, $1, "wrong", "wrong", "-", "-"; next }
            { print col, $1, $4, $2, "-", "-" }' "$file"
    done
}

# ---- Part 1: bandwidth against Open MPI and the loopback limit ----

# iperf_streams: IPERF_STREAMS servers on distinct ports, as many clients at once for
# IPERF_SECS s; writes the mean per-stream rate in GB/s to iperf3.txt.
iperf_streams() {
    local i pid port=$IPERF_PORT ports=() cpids=() rate sum=0 ok=1
    for ((i = 0; i < IPERF_STREAMS; i++)); do
        for _ in $(seq 20); do
            iperf3 -s -1 -B 127.0.0.1 -p "$port" >"$RES/iperf3_server$i.log" 2>&1 &
            IPERF_PIDS+=("$!")
            sleep 0.3
            if kill -0 "$!" 2>/dev/null; then
                ports+=("$port")
                port=$((port + 1))
                break
            fi
            port=$((port + 1))
        done
        [ "${#ports[@]}" -eq $((i + 1)) ] || {
            echo "bench: iperf3 server $i did not start (see $RES/iperf3_server$i.log)" >&2
            return 1
        }
    done
    for ((i = 0; i < IPERF_STREAMS; i++)); do
        timeout $((IPERF_SECS + 30)) iperf3 -c 127.0.0.1 -p "${ports[$i]}" -t "$IPERF_SECS" -J \
            >"$RES/iperf3_client$i.json" 2>"$RES/iperf3_client$i.err" &
        cpids+=("$!")
        IPERF_PIDS+=("$!")
    done
    for ((i = 0; i < IPERF_STREAMS; i++)); do
        wait "${cpids[$i]}" || ok=0
    done
    for pid in "${IPERF_PIDS[@]}"; do
        stop_pid "$pid"
    done
    IPERF_PIDS=()
    [ "$ok" = 1 ] || return 1
    for ((i = 0; i < IPERF_STREAMS; i++)); do
        rate=$(json_get "$RES/iperf3_client$i.json" end.sum_received.bits_per_second)
        [ -n "$rate" ] || return 1
        echo "$rate" >>"$RES/iperf3_rates.txt"
        sum=$(awk -v s="$sum" -v r="$rate" 'BEGIN { printf "%.6f", s + r / 8e9 }')
    done
    awk -v s="$sum" -v n="$IPERF_STREAMS" 'BEGIN { printf "%.3f\n", s / n }' >"$RES/iperf3.txt"
}

part_bw() {
    local sweep arena_mib round split min max part tag lo hi n w ranges=()
    echo "bench: compiling bench/mpi_allreduce.c for Open MPI"
    mpicc.openmpi -O2 -std=gnu11 -o "$RES/mpi_allreduce.openmpi" "$SRC_DIR/mpi_allreduce.c" \
        "-I$SRC_DIR/../common" -D_GNU_SOURCE "$BUILD/lib/libhcclcommon.a" -lm

    echo "bench: iperf3, $IPERF_STREAMS streams at once on lo for $IPERF_SECS s"
    if iperf_streams; then
        echo "bench: iperf3 done: $(cat "$RES/iperf3.txt") GB/s per stream"
    else
        echo "bench: iperf3 FAILED, see $RES/iperf3_*" >&2
        failures=$((failures + 1))
    fi

    # Two runs per contender and round: the small sizes with many iterations, the large ones
    # with ITERS. Each size comes from exactly one of them.
    split=$(bytes "$BW_SPLIT")
    min=$(bytes "$BW_MIN")
    max=$(bytes "$BW_MAX")
    if [ "$split" -gt "$min" ]; then
        hi=$((split / 2 > max ? max : split / 2))
        ranges+=("small:$min:$hi:$BW_SMALL_ITERS:$BW_SMALL_WARMUP")
    fi
    if [ "$split" -le "$max" ]; then
        ranges+=("large:$((split > min ? split : min)):$max:$ITERS:$WARMUP")
    fi
    # -z: both buffers come from the arena (HCCL_BUFFSIZE MiB, 200 by default); -R: malloc'd
    # buffers registered with HcclCommRegister, whose pages move into the arena too.
    arena_mib=$((max * 2 / (1 << 20) + 64))
    # The three take turns, BW_ROUNDS times: one run of each differs from the next by 10-30%
    # on this machine, and load from elsewhere then spoils one round, not one contender.
    for ((round = 1; round <= BW_ROUNDS; round++)); do
        for part in "${ranges[@]}"; do
            IFS=: read -r tag lo hi n w <<<"$part"
            sweep=(-t allreduce -d float -o sum -b "$lo" -e "$hi" -f 2 -n "$n" -w "$w")
            run_on "bw_hccld_r${round}_$tag" "$BW_DAEMONS" "$BW_DAEMONS" "" "${sweep[@]}"
            run_on "bw_hccld-z_r${round}_$tag" "$BW_DAEMONS" "$BW_DAEMONS" \
                "HCCL_BUFFSIZE=$arena_mib" "${sweep[@]}" -z
            run_on "bw_hccld-R_r${round}_$tag" "$BW_DAEMONS" "$BW_DAEMONS" \
                "HCCL_BUFFSIZE=$arena_mib" "${sweep[@]}" -R
            # pml ob1: the TCP BTL really carries the data (UCX's pml would go through shared
            # memory).
            run "bw_openmpi_r${round}_$tag" mpirun.openmpi --allow-run-as-root --oversubscribe \
                -np "$BW_DAEMONS" --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo \
                "$RES/mpi_allreduce.openmpi" -b "$lo" -e "$hi" -f 2 -n "$n" -w "$w" -l 0
        done
    done
}

# bw_medians: "column size busbw" with the median over the rounds (the lower middle one of an
# even count): column 1 hcclD, 2 hcclD-z, 3 Open MPI, 4 hcclD-R; "wrong" if any round's check
# failed.
bw_medians() {
    {
        extract 1 "$RES"/bw_hccld_r*.txt
        extract 2 "$RES"/bw_hccld-z_r*.txt
        extract 3 "$RES"/bw_openmpi_r*.txt
        extract 4 "$RES"/bw_hccld-R_r*.txt
    } | awk '
        { k = $1 " " $2; if (!(k in n)) order[++nk] = k
          if ($3 == "wrong") bad[k] = 1; else if ($3 ~ /^[0-9.]+$/) v[k, ++n[k]] = $3 + 0
          else if (!(k in n)) n[k] = 0 }
        END {
            for (i = 1; i <= nk; i++) {
                k = order[i]; m = n[k]
                if (k in bad) { print k, "wrong"; continue }
                if (m == 0) { print k, "-"; continue }
                for (a = 1; a <= m; a++) x[a] = v[k, a]
                for (a = 2; a <= m; a++)
                    for (b = a; b > 1 && x[b - 1] > x[b]; b--) { t = x[b]; x[b] = x[b - 1]; x[b - 1] = t }
                print k, x[int((m + 1) / 2)]
            }
        }'
}

print_bw() {
    local iperf=- top z h
    [ -s "$RES/iperf3.txt" ] && iperf=$(cat "$RES/iperf3.txt")
    echo
    echo "== allreduce fp32 sum, $BW_DAEMONS daemons x 1 rank on loopback (TCP):" \
        "bus bandwidth (GB/s), out of place, median of $BW_ROUNDS rounds =="
    printf "%10s %9s %9s %9s %9s %14s %16s %16s\n" size hcclD hcclD-R hcclD-z OpenMPI \
        hcclD/OpenMPI hcclD-R/OpenMPI hcclD-z/OpenMPI
    bw_medians | awk '
        { bw[$1, $2] = $3; if (!($2 in seen)) { seen[$2] = 1; sizes[++ns] = $2 } }
        function get(c, s) { return ((c, s) in bw) ? bw[c, s] : "-" }
        function div(a, b) {
            if (a !~ /^[0-9.]+$/ || b !~ /^[0-9.]+$/ || b + 0 == 0) return "-"
            return sprintf("%.2f", a / b)
        }
        END {
            for (i = 1; i <= ns; i++) {
                s = sizes[i]
                printf "%10s %9s %9s %9s %9s %14s %16s %16s\n", s, get(1, s), get(4, s),
                    get(2, s), get(3, s), div(get(1, s), get(3, s)), div(get(4, s), get(3, s)),
                    div(get(2, s), get(3, s))
            }
        }' | sort -n
    top=$(bytes "$BW_MAX")
    h=$(bw_medians | awk -v s="$top" '$1 == 1 && $2 == s { print $3 }')
    z=$(bw_medians | awk -v s="$top" '$1 == 2 && $2 == s { print $3 }')
    printf "loopback limit (iperf3, %d streams at once): %s GB/s per stream; hcclD %s busbw" \
        "$IPERF_STREAMS" "$iperf" "$BW_MAX"
    printf " %s GB/s = %s of it, hcclD-z %s GB/s = %s of it\n" "${h:--}" \
        "$(ratio "${h:--}" "$iperf")" "${z:--}" "$(ratio "${z:--}" "$iperf")"
}

# ---- Part 2: the cost model's choice against every forced algorithm ----

# The sizes MIN, MIN*F, ... up to MAX, split at SPLIT into a cheap latency sweep (many
# iterations) and a bandwidth sweep; sets SEL_SMALL and SEL_LARGE to "-b A -e B" or "".
sel_sweeps() {
    local s max split last_small='' first_large=''
    s=$(bytes "$SEL_MIN")
    max=$(bytes "$SEL_MAX")
    split=$(bytes "$SEL_SPLIT")
    while [ "$s" -le "$max" ]; do
        if [ "$s" -lt "$split" ]; then
            last_small=$s
        elif [ -z "$first_large" ]; then
            first_large=$s
        fi
        s=$(awk -v s="$s" -v f="$SEL_FACTOR" 'BEGIN { n = int(s * f); print (n > s ? n : s + 1) }')
    done
    SEL_SMALL=${last_small:+-b $(bytes "$SEL_MIN") -e $last_small}
    SEL_LARGE=${first_large:+-b $first_large -e $max}
}

part_sel() {
    local coll n sweep name iters sizes round
    # Sizes are small here: a run that stops printing is hung, not slow.
    local STALL=$SEL_STALL
    sel_sweeps
    for coll in $SEL_COLLS; do
        for n in $SEL_DAEMONS; do
            # One set of daemons serves every variant (HCCL_ALGO is the client's, per comm),
            # so that the variants of one sweep run back to back, under much the same load
            # from elsewhere; a failed run gets the next one fresh daemons.
            name=${SEL_TAG:-sel}_${coll}_${n}d
            DAEMONS_OK=0
            for ((round = 1; round <= SEL_ROUNDS; round++)); do
                for sweep in small large; do
                    if [ "$sweep" = small ]; then
                        sizes=$SEL_SMALL iters=$SEL_SMALL_ITERS
                    else
                        sizes=$SEL_LARGE iters=$SEL_ITERS
                    fi
                    [ -n "$sizes" ] || continue
                    if [ "$DAEMONS_OK" = 0 ]; then
                        if ! start_daemons "$name" "$n" info; then
                            failures=$((failures + 1))
                            continue
                        fi
                        DAEMONS_OK=1
                    fi
                    # One run times every variant, each in a comm of its own, their
                    # iterations interleaved (hccl_perf_test -A): a stretch of load from
                    # elsewhere falls on all of them alike.
                    # shellcheck disable=SC2086
                    run "${name}_cmp_${sweep}_r$round" "$RUN" -n "$n" --daemons "$SOCKS" -- \
                        "$PERF" -t "$coll" -d float -o sum $sizes -f "$SEL_FACTOR" -n "$iters" \
                        -w "$SEL_WARMUP" -A "auto,${SEL_ALGOS// /,}"
                    [ "$RUN_OK" = 1 ] || DAEMONS_OK=0
                done
            done
            stop_daemons
        done
    done
}

part_selns() {
    if ! netns_up "$NS" "$SELNS_DAEMONS" "$SELNS_RATE" >>"$RES/selns_setup.err" 2>&1; then
        echo "bench: selns: could not build the namespaces (see $RES/selns_setup.err)" >&2
        failures=$((failures + 1))
        netns_down "$NS"
        return
    fi
    NETNS=1 SEL_DAEMONS=$SELNS_DAEMONS SEL_TAG=selns part_sel
    netns_down "$NS"
}

# print_sel COLL N [TAG]: one table; its last line starts with "summary:".
print_sel() {
    local coll=$1 n=$2 tag=${3:-sel} f
    {
        # hccl_perf_test -A rows: size, count, a median time per variant (auto first), the
        # best, #wrong; one line "variant size time count" per variant.
        for f in "$RES/${tag}_${coll}_${n}d_cmp"_{small,large}_r*.txt; do
            [ -s "$f" ] || continue
            awk '/^#/ || NF < 5 { next }
                { for (i = 3; i < NF - 1; i++) print i - 2, $1, $NF + 0 != 0 ? "wrong" : $i, $2 }' "$f"
        done
        # What daemon 0 logged for the automatic runs (not "forced by HCCL_ALGO"): "choice
        # ~BUCKET ALGO" from lines "COLL: allreduce of ~BUCKET bytes per block on N daemons:
        # ALGO (predicted ...)" (once per power-of-two size), "choice =BYTES ALGO" from lines
        # "COLL: comm C seq S: allreduce, BYTES B per node, N nodes: ALGO (predicted: ...)"
        # (once per piece).
        sed -n -e "s/.*COLL: $coll of ~\([0-9]*\) bytes per block on [0-9]* daemons: \([^ ]*\) (predicted.*/choice ~\1 \2/p" \
            -e "s/.*COLL: comm [0-9]* seq [0-9]*: $coll, \([0-9]*\) B per node, [0-9]* nodes: \([^ ]*\) (predicted.*/choice =\1 \2/p" \
            "$RES/${tag}_${coll}_${n}d.hccld0.log" 2>/dev/null || true
    } | awk -v coll="$coll" -v n="$n" -v algos="$SEL_ALGOS" -v chunk="$CHUNK" -v tag="$tag" \
        -v rounds="$SEL_ROUNDS" '
        $1 == "choice" {
            # The algorithm logged most often for this piece size.
            k = ++votes[$2, $3]
            if (!($2 in chose) || k > votes[$2, chose[$2]]) chose[$2] = $3
            next
        }
        {
            # One time per variant, size and round.
            x = $3
            if (num(x)) v[$1, $2, ++nv[$1, $2]] = x + 0
            else if (!(($1, $2) in nv)) bad[$1, $2] = x
            cnt[$2] = $4
            if (!($2 in seen)) { seen[$2] = 1; sizes[++ns] = $2 }
        }
        # The median of the rounds (the lower middle one of an even count).
        function get(c, s,   k, m, i, j, tmp, a) {
            if (!((c, s) in nv)) return ((c, s) in bad) ? bad[c, s] : "-"
            m = nv[c, s]
            for (i = 1; i <= m; i++) a[i] = v[c, s, i]
            for (i = 2; i <= m; i++)
                for (j = i; j > 1 && a[j - 1] > a[j]; j--) { tmp = a[j]; a[j] = a[j - 1]; a[j - 1] = tmp }
            return a[int((m + 1) / 2)]
        }
        function num(x) { return x ~ /^[0-9.]+$/ }
        function fmt(x) { return num(x) ? sprintf("%.0f", x) : x }
        # The algorithm the daemon logged for the (full) pieces of this size: a piece has at
        # most chunk / (4 B x blocks) elements, blocks = 2 for allreduce and n + 1 for
        # allgather (one rank per daemon); the log gives its node block in bytes, exactly or
        # rounded down to a power of two.
        function choice(s,   per, c, b) {
            if (!(s in cnt)) return "-"
            per = int(chunk / (4 * (coll == "allgather" ? n + 1 : 2)))
            c = cnt[s] < per ? cnt[s] : per
            if (("=" c * 4) in chose) return chose["=" c * 4]
            for (b = 1; b * 2 <= c * 4; b *= 2) ;
            return (("~" b) in chose) ? chose["~" b] : "-"
        }
        BEGIN { na = split(algos, name, " ") }
        END {
            where = tag == "selns" ? "in namespaces, tbf on every veth" : "on loopback"
            printf "\n== %s fp32, %d daemons x 1 rank %s: median iteration time (us), out of place, iterations of the variants interleaved after barriers, median of %d rounds; auto = the cost model ==\n", coll, n, where, rounds
            printf "%10s %9s", "size", "auto"
            for (a = 1; a <= na; a++) printf " %9s", name[a]
            printf " %9s %9s %10s %11s\n", "best", "chose", "best/auto", "best/chosen"
            nok = 0; nsz = 0; nbest = 0; nchoice = 0
            for (i = 1; i <= ns; i++) {
                s = sizes[i]
                best = ""; bt = 0
                for (a = 1; a <= na; a++) {
                    x = get(a + 1, s)
                    if (num(x) && (best == "" || x + 0 < bt)) { best = name[a]; bt = x + 0 }
                }
                au = get(1, s); ch = choice(s)
                r = (best != "" && num(au) && au + 0 > 0) ? sprintf("%.2f", bt / au) : "-"
                # The forced runs of the chosen algorithm against the best: the same choice
                # without the spread between an auto run and a forced run of one algorithm.
                ct = ""
                for (a = 1; a <= na; a++) if (name[a] == ch) ct = get(a + 1, s)
                rc = (best != "" && num(ct) && ct + 0 > 0) ? sprintf("%.2f", bt / ct) : "-"
                printf "%10s %9s", s, fmt(au)
                for (a = 1; a <= na; a++) printf " %9s", fmt(get(a + 1, s))
                printf " %9s %9s %10s %11s\n", best == "" ? "-" : best, ch, r, rc
                if (r != "-") {
                    nsz++
                    if (au + 0 <= 1.1 * bt) nok++
                    if (ch == best) nbest++
                    if (rc != "-" && ct + 0 <= 1.1 * bt) nchoice++
                }
            }
            printf "summary: %s on %d daemons %s: auto within 10%% of the best forced algorithm at %d of %d sizes; forced runs of the chosen algorithm within 10%% at %d; logged choice = best at %d\n", coll, n, where, nok, nsz, nchoice, nbest
        }'
}

# ---- Part 3: bytes on the wire per node ----

part_hier() {
    local i
    if ! start_daemons hier 2 warn; then
        failures=$((failures + 1))
        return
    fi
    for i in 0 1; do
        "$CTL" --admin-socket "${DAEMON_DIRS[$i]}/hccld-admin.sock" status --json \
            >"$RES/hier_status$i.before.json" 2>>"$RES/hier.err" || true
    done
    run hier env "$RUN" -n 4 --daemons "$SOCKS" -- "$PERF" -t allreduce -d float -o sum \
        -b "$HIER_BYTES" -e "$HIER_BYTES" -n "$HIER_ITERS" -w "$HIER_WARMUP" -c 0
    for i in 0 1; do
        "$CTL" --admin-socket "${DAEMON_DIRS[$i]}/hccld-admin.sock" status --json \
            >"$RES/hier_status$i.after.json" 2>>"$RES/hier.err" || true
    done
    stop_daemons
}

print_hier() {
    local size ops i b a tx rx n=2 ranks=4
    size=$(bytes "$HIER_BYTES")
    # Every size runs out of place and in place, each WARMUP + ITERS times (+ 1 when checking);
    # the header of the run says how many of each.
    ops=$(awk '/warmup iters:/ {
        for (i = 1; i <= NF; i++) {
            if ($i == "iters:" && $(i - 1) == "warmup") w = $(i + 1)
            else if ($i == "iters:") it = $(i + 1)
            if ($i == "validation:") v = $(i + 1)
        }
        print 2 * (w + it + v); exit }' "$RES/hier.txt" 2>/dev/null || true)
    echo
    echo "== allreduce fp32 $HIER_BYTES, $n daemons x $((ranks / n)) ranks:" \
        "payload bytes on the wire per op per node (MiB) =="
    printf "%5s %9s %9s %16s %20s %9s\n" node "sent/op" "recv/op" "node ring ideal" \
        "per-rank ring" "sent/ideal"
    for i in 0 1; do
        tx=- rx=-
        b=$RES/hier_status$i.before.json
        a=$RES/hier_status$i.after.json
        if [ -n "$ops" ] && [ -s "$b" ] && [ -s "$a" ]; then
            tx=$(awk -v a="$(json_get "$a" net_tx_bytes)" -v b="$(json_get "$b" net_tx_bytes)" \
                -v o="$ops" 'BEGIN { printf "%.2f", (a - b) / o / 1048576 }')
            rx=$(awk -v a="$(json_get "$a" net_rx_bytes)" -v b="$(json_get "$b" net_rx_bytes)" \
                -v o="$ops" 'BEGIN { printf "%.2f", (a - b) / o / 1048576 }')
        fi
        awk -v node="$i" -v tx="$tx" -v rx="$rx" -v s="$size" -v n="$n" -v r="$ranks" 'BEGIN {
            ideal = 2 * (n - 1) / n * s / 1048576
            flat = r / n * 2 * (r - 1) / r * s / 1048576
            printf "%5s %9s %9s %16.2f %20.2f %9s\n", node, tx, rx, ideal, flat,
                tx == "-" ? "-" : sprintf("%.2f", tx / ideal) }'
    done
    echo "(${ops:-?} allreduces of $HIER_BYTES counted; node ring: 2(n-1)/n x size, n = $n" \
        "nodes; per-rank ring: $((ranks / n)) ranks x 2($ranks-1)/$ranks x size)"
}

# ---- Main ----

for part in $PARTS; do
    "part_$part"
done

{
    for part in $PARTS; do
        case $part in
        bw) print_bw ;;
        sel)
            for coll in $SEL_COLLS; do
                for n in $SEL_DAEMONS; do
                    print_sel "$coll" "$n"
                done
            done
            ;;
        selns)
            for coll in $SEL_COLLS; do
                print_sel "$coll" "$SELNS_DAEMONS" selns
            done
            ;;
        hier) print_hier ;;
        esac
    done
} >"$RES/summary.raw"
# The selection tables' summary lines again at the end, together.
{
    cat "$RES/summary.raw"
    if grep -q '^summary: ' "$RES/summary.raw"; then
        echo
        echo "== selection summary (auto within 10%: auto time <= 1.1 x best forced time) =="
        sed -n 's/^summary: //p' "$RES/summary.raw"
    fi
} | tee "$RES/summary.txt"
rm -f "$RES/summary.raw"

if [ "$failures" -ne 0 ]; then
    echo "bench: $failures run(s) failed; raw outputs in $RES" >&2
    exit 1
fi
echo "bench: raw outputs in $RES"
