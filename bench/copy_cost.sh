#!/usr/bin/env bash
# Builds bench/copy_cost.c and runs it at 256 KiB, 1 MiB and 4 MiB: what a staging copy costs
# when the other core reads the staged bytes, and what process_vm_readv (MPI's single copy)
# costs, against plain memcpy (`make bench-copy`; figures in bench/RESULTS.md).
#
#   bench/copy_cost.sh [BUILD]      (default build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
mkdir -p "$BUILD/bench"
cc -O2 -std=gnu11 -pthread -o "$BUILD/bench/copy_cost" bench/copy_cost.c
for kib in 256 1024 4096; do
    "$BUILD/bench/copy_cost" "$kib"
done
