#!/bin/bash
# Runs one host command inside a QEMU guest that has two soft-RoCE devices, rxe0 on veth0
# (10.77.0.1) and rxe1 on veth1 (10.77.0.2), and exits with that command's exit code.
# Exit 125 means the guest never reported one (build or boot failure, panic, timeout).
# See README.md beside this file.
set -euo pipefail

HERE=$(cd "${BASH_SOURCE[0]%/*}" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
HARNESS_FAILED=125

usage() {
    cat >&2 <<EOF
usage: $0 [--cache DIR] [--timeout SECS] -- COMMAND [ARG...]
  --cache DIR     kernel and initramfs cache (default $ROOT/build/rdma-vm)
  --timeout SECS  kill the guest after SECS seconds, boot included (default 600)
COMMAND runs as root under chroot of the host's / (read-only) in the current directory, with
PATH and every HCCL*/HCCLD* variable of this environment. Exit: COMMAND's code, or 125.
EOF
    exit 2
}

harness_fail() {
    echo "rdma-vm/run.sh: FAILED: $*" >&2
    exit "$HARNESS_FAILED"
}

cache="$ROOT/build/rdma-vm"
timeout_s=600
while [ $# -gt 0 ]; do
    case $1 in
    --cache)
        [ $# -ge 2 ] || usage
        cache=$2
        shift 2
        ;;
    --timeout)
        if [ $# -lt 2 ] || ! [[ $2 =~ ^[1-9][0-9]*$ ]]; then
            usage
        fi
        timeout_s=$2
        shift 2
        ;;
    --)
        shift
        break
        ;;
    *) usage ;;
    esac
done
[ $# -gt 0 ] || usage

command -v qemu-system-x86_64 >/dev/null ||
    harness_fail "no qemu-system-x86_64: run scripts/install-deps.sh (as root)"
"$HERE/build.sh" "$cache" || harness_fail "building the guest's kernel and initramfs failed"
cache=$(cd "$cache" && pwd)

# The guest sees the host's / read-only, except /tmp and /run, which are its own tmpfs; a
# working directory inside /tmp stays visible through its top folder (e.g. a clone there).
cwd=$(pwd -P)
tmpkeep=""
case $cwd in
/tmp/hccld-vm | /tmp/hccld-vm/*)
    harness_fail "the working directory $cwd is hidden in the guest"
    ;;
/tmp/*)
    tmpkeep=${cwd#/tmp/}
    tmpkeep=${tmpkeep%%/*}
    ;;
/run | /run/* | /proc | /proc/* | /sys | /sys/* | /dev | /dev/*)
    harness_fail "the working directory $cwd is not the host's in the guest: run from elsewhere"
    ;;
esac

job=$(mktemp -d "${TMPDIR:-/tmp}/hccld-vm.XXXXXX")
qemu_pid=""
tail_pid=""
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
    # Only the processes this script started: QEMU (through timeout) and tail.
    if [ -n "$qemu_pid" ] && kill -0 "$qemu_pid" 2>/dev/null; then
        kill -TERM "$qemu_pid" 2>/dev/null || true
        wait "$qemu_pid" 2>/dev/null || true
    fi
    if [ -n "$tail_pid" ]; then
        kill "$tail_pid" 2>/dev/null || true
        wait "$tail_pid" 2>/dev/null || true
    fi
    rm -rf "$job"
}
trap cleanup EXIT
trap 'echo "rdma-vm/run.sh: interrupted" >&2; exit 130' INT
trap 'echo "rdma-vm/run.sh: terminated" >&2; exit 143' TERM

# The marker carries a random token so that nothing the command prints can pass for it.
nonce=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
echo "$nonce" >"$job/nonce"
echo "$tmpkeep" >"$job/tmpkeep"

# cmd.sh runs under the host's bash in the guest; printf %q quotes for exactly that shell.
# The command is an array so that a first word like A=B stays a command name, as with exec.
{
    echo '# Written by tests/rdma-vm/run.sh; run in the guest by its /init.'
    printf 'export PATH=%q HOME=/tmp HCCLD_VM=1\n' "$PATH"
    while IFS= read -r name; do
        case $name in
        HCCL*) printf 'export %s=%q\n' "$name" "${!name}" ;;
        esac
    done < <(compgen -e)
    printf 'cd -- %q || { echo "rdma-vm: cannot cd to %q in the guest" >&2; exit 125; }\n' \
        "$cwd" "$cwd"
    printf 'cmd=('
    printf ' %q' "$@"
    # shellcheck disable=SC2016 # the expansion is for the guest's bash, not this one
    printf ' )\n"${cmd[@]}"\n'
} >"$job/cmd.sh"

log="$job/console.log"
: >"$log"
start=$(date +%s.%N)
# timeout -k: QEMU gets SIGTERM at the limit and SIGKILL 10 s later if it still hangs.
timeout -k 10 "$timeout_s" qemu-system-x86_64 \
    -nodefaults -no-user-config -machine pc -accel tcg,thread=multi -cpu max \
    -m 2048 -smp 2 -display none -vga none -monitor none -serial stdio -nic none -no-reboot \
    -kernel "$cache/vmlinux" -initrd "$cache/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1" \
    -virtfs local,path=/,mount_tag=host,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$job,mount_tag=job,security_model=none,readonly=on" \
    </dev/null >>"$log" 2>&1 &
qemu_pid=$!
tail -n +1 -s 0.2 -f --pid="$qemu_pid" "$log" &
tail_pid=$!

qemu_rc=0
wait "$qemu_pid" || qemu_rc=$?
qemu_pid=""
wait "$tail_pid" || true
tail_pid=""
elapsed=$(echo "$(date +%s.%N) $start" | awk '{ printf "%.1f", $1 - $2 }')

marker=$(tr -d '\r' <"$log" | grep -E "^HCCLD-VM-EXIT=[0-9]+ run=$nonce\$" | tail -n 1 || true)
if [ -z "$marker" ]; then
    if [ "$qemu_rc" -eq 124 ] || [ "$qemu_rc" -eq 137 ]; then
        why="timed out after $timeout_s s"
    else
        why="QEMU exited with status $qemu_rc"
    fi
    {
        echo "rdma-vm/run.sh: ================================================================"
        echo "rdma-vm/run.sh: FAILED: the guest never reported the command's exit code ($why)."
        echo "rdma-vm/run.sh: This is a boot or harness failure, NOT a test result. Last 40 console lines:"
        tail -n 40 "$log" | tr -d '\r' | sed 's/^/    | /'
        echo "rdma-vm/run.sh: ================================================================"
    } >&2
    exit "$HARNESS_FAILED"
fi
rc=${marker#HCCLD-VM-EXIT=}
rc=${rc%% *}
echo "rdma-vm/run.sh: command exited $rc; guest wall time ${elapsed} s" >&2
exit "$rc"
