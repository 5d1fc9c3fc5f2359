#!/usr/bin/env bash
# Runs a program on the model library on a host set up as one with the model's four ConnectX-5
# functions would be, so that drivers which look beyond libibverbs (DPDK's mlx5 PMD) find what
# they look for:
#   - libibverbs.so.1 and libmlx5.so.1 -> the model library, first in LD_LIBRARY_PATH
#     (scripts/model-env.sh builds it);
#   - a PCI tree for DPDK's bus scan (SYSFS_PCI_DEVICES): vendor 0x15b3, device 0x1017, class,
#     subsystem, numa_node, resource (BAR 0), driver -> mlx5_core, uevent;
#   - the model's netdevs mdl0..mdl3 as kernel interfaces with the model's MACs (two veth
#     pairs, cabled as the model's devices are), in a network namespace this script creates,
#     runs the program in, and removes when the program ends.
# The model library writes its own RDMA sysfs tree (docs/model-library.md, Fake sysfs).
#
#   sudo scripts/model-host.sh dpdk-testpmd -l 0-1 --no-huge -m 512 --no-shconf \
#       -a 0000:3b:00.0,dv_flow_en=0 -a 0000:3b:00.1,dv_flow_en=0 -- -i
#
# The environment passes through (RAWPKT_MODEL_DEVX=0: a kernel without DevX). Needs root
# (ip netns). Exit status: the program's; 2 for bad usage; 1 when the host cannot be set up.
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
case "${1:-}" in
-h | --help)
    sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
"" | -*)
    echo "model-host.sh: usage: model-host.sh PROGRAM [ARGS...]${1:+ (unknown option $1)}" >&2
    exit 2
    ;;
esac
if ! command -v "$1" >/dev/null; then
    echo "model-host.sh: $1: no such program" >&2
    exit 2
fi
if [ "$(id -u)" != 0 ]; then
    echo "model-host.sh: needs root (it creates a network namespace for the model's netdevs)" >&2
    exit 1
fi
for tool in ip mktemp; do
    command -v $tool >/dev/null || { echo "model-host.sh: $tool is missing (apt-get install iproute2 coreutils)" >&2; exit 1; }
done

# The model's functions (crates/model-verbs/src/global.rs DEVS): PCI address, netdev, MAC.
pcis=(0000:3b:00.0 0000:3b:00.1 0000:3c:00.0 0000:3c:00.1)
netdevs=(mdl0 mdl1 mdl2 mdl3)
macs=(02:4d:4c:35:00:00 02:4d:4c:35:00:01 02:4d:4c:35:00:02 02:4d:4c:35:00:03)

ns="rawpkt-model-$$"
dir=""
child=""
cleanup() {
    # SIGTERM first; a program that does not end on it within 5 s (testpmd at its interactive
    # prompt reads on) is killed: the launcher must end, and its namespace go, whatever it runs.
    if [ -n "$child" ] && kill -TERM "$child" 2>/dev/null; then
        for _ in $(seq 50); do
            kill -0 "$child" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$child" 2>/dev/null
        wait "$child" 2>/dev/null
    fi
    ip netns del "$ns" 2>/dev/null
    [ -n "$dir" ] && rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
trap 'exit 129' HUP

# What a launcher killed before its cleanup (SIGKILL) left: namespaces and PCI trees named
# after a pid that is no longer a launcher.
for old in $(ip netns list 2>/dev/null | sed -n 's/^\(rawpkt-model-[0-9]*\).*/\1/p'); do
    pid=${old#rawpkt-model-}
    grep -qs model-host.sh "/proc/$pid/cmdline" || ip netns del "$old" 2>/dev/null
done
for old in "${TMPDIR:-/tmp}"/rawpkt-model-host.*.*; do
    [ -d "$old" ] || continue
    pid=${old##*/rawpkt-model-host.}
    pid=${pid%%.*}
    grep -qs model-host.sh "/proc/$pid/cmdline" || rm -rf "$old"
done

# LD_LIBRARY_PATH with the soname links, from model-env.sh (which builds the library).
env_line=$("$root/scripts/model-env.sh") || exit 1
eval "$env_line"

dir=$(mktemp -d "${TMPDIR:-/tmp}/rawpkt-model-host.$$.XXXXXX") || exit 1
# The PCI tree: what /sys/bus/pci/devices/<addr> holds for a ConnectX-5 PF bound to mlx5_core
# and what DPDK's scan reads (drivers/bus/pci/linux/pci.c pci_scan_one: vendor, device,
# subsystem_*, class, numa_node, resource, the driver link; the kernel's pci-sysfs.c formats).
# BAR 0: 32 MiB, 64-bit prefetchable memory (resource flags 0x14220c), as a ConnectX-5 shows it.
mkdir -p "$dir/drivers/mlx5_core" || exit 1
for i in 0 1 2 3; do
    pci=${pcis[$i]}
    d="$dir/devices/$pci"
    mkdir -p "$d" || exit 1
    echo 0x15b3 >"$d/vendor"
    echo 0x1017 >"$d/device"
    echo 0x15b3 >"$d/subsystem_vendor"
    echo 0x0007 >"$d/subsystem_device"
    echo 0x020000 >"$d/class"
    echo 0 >"$d/numa_node"
    {
        bar=$((0xb0000000 + i * 0x2000000))
        printf '0x%016x 0x%016x 0x%016x\n' $bar $((bar + 0x1ffffff)) $((0x14220c))
        for _ in $(seq 12); do printf '0x%016x 0x%016x 0x%016x\n' 0 0 0; done
    } >"$d/resource"
    ln -s ../../drivers/mlx5_core "$d/driver"
    printf 'DRIVER=mlx5_core\nPCI_CLASS=20000\nPCI_ID=15B3:1017\nPCI_SUBSYS_ID=15B3:0007\nPCI_SLOT_NAME=%s\nMODALIAS=pci:v000015B3d00001017sv000015B3sd00000007bc02sc00i00\n' \
        "$pci" >"$d/uevent"
done

# The netdevs, cabled as the model's devices: mdl0-mdl1 and mdl2-mdl3. IPv6 off, so the kernel
# sends nothing of its own on them.
if ! ip netns add "$ns"; then
    echo "model-host.sh: cannot create network namespace $ns" >&2
    exit 1
fi
ip -n "$ns" link set lo up
for a in 0 2; do
    ip -n "$ns" link add "${netdevs[$a]}" type veth peer name "${netdevs[$a + 1]}" || exit 1
done
for i in 0 1 2 3; do
    ip netns exec "$ns" sysctl -q -w "net.ipv6.conf.${netdevs[$i]}.disable_ipv6=1" >/dev/null
    ip -n "$ns" link set "${netdevs[$i]}" address "${macs[$i]}" || exit 1
    ip -n "$ns" link set "${netdevs[$i]}" up || exit 1
done

# A NIC's link is up before its driver's user starts; a veth's carrier comes up once both ends
# are up, when the kernel's link watch gets to it (up to a second later).
for _ in $(seq 200); do
    down=$(ip -n "$ns" -o link show up | grep -c -e NO-CARRIER -e LOWERLAYERDOWN)
    [ "$(ip -n "$ns" -o link show up | grep -c 'mdl[0-3]@')" = 4 ] && [ "$down" = 0 ] && break
    sleep 0.05
done

# In the background (a TERM to this script ends it and removes the namespace), with this
# script's standard input: bash would give a background job /dev/null.
SYSFS_PCI_DEVICES="$dir/devices" ip netns exec "$ns" "$@" <&0 &
child=$!
wait "$child"
status=$?
child=""
exit $status
