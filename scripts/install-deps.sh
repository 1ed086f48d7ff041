#!/bin/sh
# Installs every Debian package hcclD needs to build, test, demo and benchmark.
# Safe to run again: apt-get skips what is already installed.
set -eu

# clang's runtimes (libFuzzer, ASan) are only a recommendation of clang: name them, since
# --no-install-recommends skips them and the fuzz targets of `make test` link against them.
PKGS="build-essential gcc clang libclang-rt-14-dev clang-format pkg-config make git
libuv1-dev libprotobuf-c-dev protobuf-c-compiler libhwloc-dev check
libibverbs-dev librdmacm-dev libsystemd-dev libjansson-dev libinih-dev libsodium-dev
libmicrohttpd-dev prometheus
iproute2 procps iptables iperf3 systemd
python3 python3-numpy python3-torch"

# hccl-prof draws its plots with gnuplot (the test of it too).
PKGS="$PKGS gnuplot-nox"

# The doc-test (tests/python/test_docs.py) finds the code blocks with a CommonMark parser, and
# docs/profiling.md's queries are jq.
PKGS="$PKGS python3-markdown-it jq"

# The man pages are made from each program's --help by help2man; make test reads them with man,
# and runs hccld-ctl's completion under bash-completion.
PKGS="$PKGS help2man man-db bash-completion"

# python3-torch's BLAS is whatever libblas.so.3 points to: the reference BLAS unless an optimised
# one is installed (a DDP step of bench/torch_ddp.py's model: 1.2 s, 0.23 s with OpenBLAS). The
# serial OpenBLAS starts no threads of its own, which would spin on cores the ranks share.
PKGS="$PKGS libopenblas0-serial"

# The soft-RoCE guest (tests/rdma-vm) boots Debian's own kernel under QEMU and runs the host's
# rdma-core tools in it: this machine's kernel has no rdma_rxe and there is no RDMA hardware.
PKGS="$PKGS qemu-system-x86 busybox-static cpio kmod
rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest"

# Benchmarks compare against both MPIs; only the bench targets need them.
if [ "${HCCLD_DEPS_BENCH:-0}" = 1 ]; then
    PKGS="$PKGS openmpi-bin libopenmpi-dev mpich libmpich-dev"
fi

if [ "$(id -u)" != 0 ]; then
    echo "install-deps: run as root (or install: $PKGS)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# shellcheck disable=SC2086
if ! apt-get install -y --no-install-recommends $PKGS; then
    apt-get update
    # shellcheck disable=SC2086
    apt-get install -y --no-install-recommends $PKGS
fi
