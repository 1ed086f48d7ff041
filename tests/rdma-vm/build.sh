#!/bin/bash
# Builds what the soft-RoCE guest boots, once, into CACHE_DIR: Debian's current kernel
# (the package linux-image-amd64 depends on, unpacked with its modules) and an initramfs of
# busybox, the modules rdma_rxe and 9p need, and ./init. A later run with everything in place
# does nothing. The kernel is fetched only when CACHE_DIR has none: delete CACHE_DIR to move
# to a newer one.
#
# CACHE_DIR/VERSION   kernel version in use, e.g. 6.1.0-57-amd64
# CACHE_DIR/vmlinuz   that kernel, as packaged
# CACHE_DIR/vmlinux   the same kernel uncompressed, which QEMU boots directly (PVH entry)
# CACHE_DIR/initrd.gz the initramfs; initrd.key says which inputs built it
# CACHE_DIR/kernel/   the unpacked package, with modules.dep from depmod
set -euo pipefail

# Load order inside the guest (there is no modprobe there). crc32_generic first: rxe asks the
# crypto layer for crc32 and nothing in the guest would load it on demand.
MODULES=(
    crypto/crc32_generic
    fs/configfs/configfs
    drivers/virtio/virtio_ring
    drivers/virtio/virtio
    drivers/virtio/virtio_pci_modern_dev
    drivers/virtio/virtio_pci_legacy_dev
    drivers/virtio/virtio_pci
    net/9p/9pnet
    net/9p/9pnet_virtio
    fs/netfs/netfs
    fs/fscache/fscache
    fs/9p/9p
    drivers/net/veth
    net/ipv4/udp_tunnel
    net/ipv6/ip6_udp_tunnel
    drivers/infiniband/core/ib_core
    drivers/infiniband/core/ib_uverbs
    drivers/infiniband/core/iw_cm
    drivers/infiniband/core/ib_cm
    drivers/infiniband/core/rdma_cm
    drivers/infiniband/core/rdma_ucm
    drivers/infiniband/sw/rxe/rdma_rxe
)

HERE=$(cd "${BASH_SOURCE[0]%/*}" && pwd)
SELF="$HERE/${BASH_SOURCE[0]##*/}"

die() {
    echo "rdma-vm/build.sh: ERROR: $*" >&2
    exit 1
}

# Scratch folders of a step that failed halfway go, so the next run starts clean.
SCRATCH=()
cleanup() {
    [ ${#SCRATCH[@]} -eq 0 ] || rm -rf "${SCRATCH[@]}"
}
trap cleanup EXIT

note() {
    echo "rdma-vm/build.sh: $*" >&2
}

need_tools() {
    local t missing=()
    for t in "$@"; do
        command -v "$t" >/dev/null || missing+=("$t")
    done
    [ ${#missing[@]} -eq 0 ] ||
        die "missing ${missing[*]}: run scripts/install-deps.sh (as root)"
}

# apt's package lists may be absent on a fresh machine or stale after the mirror dropped an
# old kernel ABI; refresh them once, as scripts/install-deps.sh does, then retry.
apt_refresh() {
    [ "$(id -u)" = 0 ] || return 1
    note "refreshing apt's package lists (apt-get update)"
    apt-get update -qq >&2
}

kernel_package() {
    apt-cache depends linux-image-amd64 2>/dev/null |
        awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}

fetch_kernel() {
    local pkg version work deb
    need_tools apt-cache apt-get dpkg depmod
    pkg=$(kernel_package)
    if [ -z "$pkg" ] && apt_refresh; then
        pkg=$(kernel_package)
    fi
    [ -n "$pkg" ] || die "apt-cache depends linux-image-amd64 names no kernel package" \
        "(no apt lists: run apt-get update as root)"
    version=${pkg#linux-image-}
    note "fetching kernel $pkg (about 70 MB, once)"

    work=$(mktemp -d "$CACHE/fetch.XXXXXX")
    SCRATCH+=("$work")
    # apt downloads as user _apt where that user may write (else it warns and uses root).
    chown _apt "$work" 2>/dev/null || true
    if ! (cd "$work" && apt-get download -q "$pkg" >&2); then
        if ! apt_refresh || ! (cd "$work" && apt-get download -q "$pkg" >&2); then
            die "apt-get download $pkg failed: is the Debian mirror reachable?"
        fi
    fi
    deb=$(find "$work" -maxdepth 1 -name "${pkg}_*.deb" -print -quit)
    [ -n "$deb" ] || die "apt-get download $pkg left no .deb in $work"

    dpkg -x "$deb" "$work/kernel" || die "dpkg -x $deb failed"
    rm -f "$deb"
    [ -f "$work/kernel/boot/vmlinuz-$version" ] ||
        die "$pkg has no boot/vmlinuz-$version"
    [ -d "$work/kernel/lib/modules/$version/kernel" ] ||
        die "$pkg has no lib/modules/$version/kernel"
    depmod -b "$work/kernel" "$version" || die "depmod -b $work/kernel $version failed"
    check_modules "$work/kernel" "$version"

    rm -rf "$CACHE/kernel" "$CACHE/vmlinuz" "$CACHE/vmlinux" "$CACHE/initrd.key"
    mv "$work/kernel" "$CACHE/kernel"
    cp "$CACHE/kernel/boot/vmlinuz-$version" "$CACHE/vmlinuz"
    rmdir "$work"
    # VERSION last: its presence is what says the kernel half of the cache is complete.
    echo "$version" >"$CACHE/VERSION.tmp"
    mv "$CACHE/VERSION.tmp" "$CACHE/VERSION"
}

# Under TCG, unpacking the xz-compressed bzImage takes the guest 4-6 s of every boot; the ELF
# inside it has a PVH entry note, so QEMU can load it as it is and skip that.
extract_vmlinux() {
    local off
    need_tools xz
    SCRATCH+=("$CACHE/vmlinux.tmp")
    off=$(LC_ALL=C grep -abo -m 1 $'\xfd7zXZ\x00' "$CACHE/vmlinuz" || true)
    off=${off%%:*}
    [ -n "$off" ] || die "$CACHE/vmlinuz holds no xz stream (is it still xz-compressed?)"
    # xz stops at the end of its stream, so tail may die of SIGPIPE: only xz's status counts.
    { tail -c +$((off + 1)) "$CACHE/vmlinuz" || true; } |
        xz -dc --single-stream >"$CACHE/vmlinux.tmp" ||
        die "unpacking vmlinux from $CACHE/vmlinuz failed"
    [ "$(head -c 4 "$CACHE/vmlinux.tmp")" = $'\x7fELF' ] ||
        die "what $CACHE/vmlinuz holds is no ELF kernel"
    mv "$CACHE/vmlinux.tmp" "$CACHE/vmlinux"
}

# Every listed module must exist, and everything it needs (modules.dep) must come earlier in
# the list or be built in: a kernel update that breaks the order fails here, not at boot.
check_modules() {
    local root=$1 version=$2 dir m dep
    local -A seen=()
    dir="$root/lib/modules/$version"
    for m in "${MODULES[@]}"; do
        [ -f "$dir/kernel/$m.ko" ] || die "kernel $version has no $m.ko" \
            "$(grep -qx "kernel/$m.ko" "$dir/modules.builtin" && echo '(built in now: drop it from MODULES)')"
        while read -r dep; do
            dep=${dep#kernel/}
            [ -n "${seen[${dep%.ko}]:-}" ] ||
                die "$m needs $dep, which MODULES does not load before it"
        done < <(awk -v m="kernel/$m.ko:" '$1 == m { for (i = 2; i <= NF; i++) print $i }' \
            "$dir/modules.dep")
        seen[$m]=1
    done
}

build_initramfs() {
    local version=$1 key=$2 stage m
    need_tools cpio gzip
    [ -x /bin/busybox ] || die "no /bin/busybox: install busybox-static"
    # The initramfs has no libc: only the static build of busybox runs there.
    case $(LC_ALL=C ldd /bin/busybox 2>&1 || true) in
    *"not a dynamic executable"*) ;;
    *) die "/bin/busybox is not statically linked: install busybox-static" ;;
    esac
    note "building the initramfs for $version"

    stage=$(mktemp -d "$CACHE/initramfs.XXXXXX")
    SCRATCH+=("$stage" "$CACHE/initrd.gz.tmp")
    mkdir -p "$stage"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,host,job,oldtmp,lib/modules}
    cp /bin/busybox "$stage/bin/busybox"
    install -m 755 "$HERE/init" "$stage/init"
    for m in "${MODULES[@]}"; do
        cp "$CACHE/kernel/lib/modules/$version/kernel/$m.ko" "$stage/lib/modules/"
        echo "${m##*/}.ko" >>"$stage/modules.order"
    done
    (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort |
        cpio -o -H newc -R 0:0 --quiet | gzip -6) >"$CACHE/initrd.gz.tmp" ||
        die "cpio/gzip of the initramfs failed"
    rm -rf "$stage"
    mv "$CACHE/initrd.gz.tmp" "$CACHE/initrd.gz"
    echo "$key" >"$CACHE/initrd.key"
}

main() {
    if [ $# -ne 1 ] || [ -z "$1" ]; then
        echo "usage: $0 CACHE_DIR" >&2
        exit 2
    fi
    [ -d "$1" ] || mkdir -p "$1" || die "cannot create $1"
    CACHE=$(cd "$1" && pwd)
    # Two runs at once (two test suites) would fetch into and replace the same files.
    exec 9>"$CACHE/.lock"
    flock 9

    if [ ! -s "$CACHE/VERSION" ] || [ ! -f "$CACHE/vmlinuz" ]; then
        fetch_kernel
    fi
    [ -f "$CACHE/vmlinux" ] || extract_vmlinux
    local version key
    version=$(<"$CACHE/VERSION")
    # The initramfs depends on the kernel, this script (MODULES) and init: rebuild it when
    # any of them changed, and only then.
    key=$(cat "$SELF" "$HERE/init" /bin/busybox | sha256sum)
    key="$version ${key%% *}"
    local old=""
    [ ! -f "$CACHE/initrd.key" ] || old=$(<"$CACHE/initrd.key")
    if [ ! -f "$CACHE/initrd.gz" ] || [ "$old" != "$key" ]; then
        build_initramfs "$version" "$key"
    fi
}

main "$@"
