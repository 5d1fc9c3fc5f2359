#!/usr/bin/env bash
# peers-xconnect.sh -- rawpkt's l2-xconnect with xdp: ports side by side with dpdk-testpmd io
# forwarding (net_af_xdp, net_af_packet) in one run, on one veth topology this script builds (and
# deletes on exit), with the same generator, the same sink and the same CPUs:
#
#   ns rpxc-g$$          ns rpxc-x$$                                 ns rpxc-s$$
#   g$T  <==veth==>  xa$T  [forwarder, CPU1]  xb$T  <==veth==>  s$T
#   generator, CPU0        rawpkt l2-xconnect xdp:xa,rule=any xdp:xb,rule=any     native XDP_DROP
#   (rawpkt pktgen         | testpmd io, 2x net_af_xdp                            (napi/s$T), counted
#    xdp:g$T, 60 B,        | testpmd io, 2x net_af_packet                         by s$T rx_packets
#    max rate)
#
# Per measurement: fresh topology, forwarder up (rawpkt: its "forwarding:" line; testpmd: 4 s),
# generator up, WARMUP s, then a WINDOW s window over the kernel counters of the four veth ends,
# /proc/stat and the CPU time of the forwarder, the generator and the veth NAPI threads. Every
# veth end has threaded NAPI; the NAPI threads are pinned to the CPU of each NAPI_CPUS entry
# (1: with the forwarder, the testbed's convention; 0: with the generator). One round runs every
# (NAPI CPU, forwarder) pair once, forwarders alternating; ROUNDS rounds; the table has medians.
#
#   sink Mpps    = s rx_packets / s (every frame the sink's XDP_DROP saw: forwarded frames)
#   xc in Mpps   = xa rx_packets - rx_dropped (frames xa's receive path took without dropping;
#                  for the AF_XDP forwarders a full socket ring counts in rx_dropped)
#   offered Mpps = g tx_packets + tx_dropped (what the generator pushed into its veth)
#
# The measuring part holds /tmp/rawpkt-bench.lock (flock), so that it does not overlap other
# measurements on the shared VM. Needs root, iproute2, ethtool, clang (BPF target), python3,
# taskset, flock, dpdk-testpmd (Debian: dpdk dpdk-dev):
#   apt-get install -y --no-install-recommends dpdk dpdk-dev clang ethtool python3
# Env: ROUNDS=3 WINDOW=10 WARMUP=3 NAPI_CPUS="1 0" FORWARDERS="rawpkt-xdp tpmd-afxdp tpmd-afpacket"
#      GEN=pktgen|tpmd-afpacket. Logs and raw results in /tmp/rawpkt-xc.$$ (kept).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-3}
WINDOW=${WINDOW:-10}
WARMUP=${WARMUP:-3}
NAPI_CPUS=${NAPI_CPUS:-1 0}
FORWARDERS=${FORWARDERS:-rawpkt-xdp tpmd-afxdp tpmd-afpacket}
GEN=${GEN:-pktgen}
LOCK=/tmp/rawpkt-bench.lock
W=/tmp/rawpkt-xc.$$
RESULTS=$W/results.tsv

die() { echo "peers-xconnect.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (namespaces, XDP, AF_XDP)"
for t in ip ethtool clang python3 taskset flock dpdk-testpmd setsid pgrep; do
  command -v "$t" >/dev/null ||
    die "missing $t; apt-get install -y --no-install-recommends dpdk dpdk-dev clang ethtool python3"
done
[ "$(nproc)" -ge 2 ] || die "needs 2 CPUs (generator on CPU0, forwarder on CPU1)"

# Unique names: namespaces carry the pid; interface names are short (IFNAMSIZ, and the NAPI
# kthreads are called napi/<ifname>-<id> in a 15-character comm).
T=$(($$ % 100000))
NS_G=rpxc-g$$ NS_X=rpxc-x$$ NS_S=rpxc-s$$
IF_G=g$T IF_XA=xa$T IF_XB=xb$T IF_S=s$T
MAC_G=02:52:51:02:00:01 MAC_XA=02:52:51:02:00:02 MAC_XB=02:52:51:03:00:01 MAC_S=02:52:51:03:00:02
ENDS=("$NS_G $IF_G" "$NS_X $IF_XA" "$NS_X $IF_XB" "$NS_S $IF_S")

mkdir -p "$W/logs" "$W/dpdk-run"
: >"$RESULTS"
PGIDS=()

stop_all() {
  local p
  for p in "${PGIDS[@]}"; do kill -INT -- "-$p" 2>/dev/null || true; done
  for p in "${PGIDS[@]}"; do
    for _ in $(seq 50); do kill -0 -- "-$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$p" 2>/dev/null || true
  done
  PGIDS=()
}

topology_down() {
  local ns
  for ns in "$NS_G" "$NS_X" "$NS_S"; do ip netns del "$ns" 2>/dev/null || true; done
}

cleanup() {
  stop_all
  topology_down
}
trap cleanup EXIT
trap 'exit 130' INT TERM

topology_up() {
  topology_down
  local ns ifn e
  for ns in "$NS_G" "$NS_X" "$NS_S"; do
    ip netns add "$ns"
    # No IPv6 (no DAD, RS, MLD) and no IPv4 address: the only frames are the generator's.
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    ip -n "$ns" link set lo up
  done
  ip link add "$IF_G" netns "$NS_G" address $MAC_G numtxqueues 1 numrxqueues 1 type veth \
    peer name "$IF_XA" netns "$NS_X" address $MAC_XA numtxqueues 1 numrxqueues 1
  ip link add "$IF_XB" netns "$NS_X" address $MAC_XB numtxqueues 1 numrxqueues 1 type veth \
    peer name "$IF_S" netns "$NS_S" address $MAC_S numtxqueues 1 numrxqueues 1
  for e in "${ENDS[@]}"; do
    read -r ns ifn <<<"$e"
    ip -n "$ns" link set "$ifn" up
    # As ../shared/testbed/veth-testbed.sh: GRO on (veth's NAPI path), TSO on, threaded NAPI.
    ip netns exec "$ns" ethtool -K "$ifn" gro on tso on >/dev/null 2>&1 || true
    ip netns exec "$ns" sh -c "echo 1 > /sys/class/net/$ifn/threaded" 2>/dev/null || true
  done
  ip -n "$NS_S" link set dev "$IF_S" xdpdrv obj "$W/xdp_drop.o" sec xdp
}

# veth re-creates its NAPI threads when an XDP program comes or goes: pin after every start.
napi_pids() { pgrep "^napi/($IF_G|$IF_XA|$IF_XB|$IF_S)-" || true; }
pin_napi() { # cpu
  local cpu=$1 e ns ifn pid
  for e in "${ENDS[@]}"; do
    read -r ns ifn <<<"$e"
    ip netns exec "$ns" sh -c "echo 1 > /sys/class/net/$ifn/threaded" 2>/dev/null || true
  done
  # (a thread of a veth being deleted may vanish on the way)
  for pid in $(napi_pids); do taskset -pc "$cpu" "$pid" >/dev/null 2>&1 || true; done
}

# Starts "$@" in its own process group (setsid execs: $! is the command), output to log $1,
# without the lock's descriptor (a tool that outlived us must not keep others waiting).
start() {
  local log=$1
  shift
  setsid "$@" </dev/null >"$log" 2>&1 9>&- &
  PGIDS+=("$!")
  LAST=$!
}

counters() { # "ns if" -> "rx rxd tx txd"
  local ns ifn
  read -r ns ifn <<<"$1"
  ip netns exec "$ns" sh -c "cd /sys/class/net/$ifn/statistics && echo \$(cat rx_packets rx_dropped tx_packets tx_dropped)"
}
ticks() { # pids... -> "utime stime", summed (clock ticks)
  local p u=0 s=0 f a
  for p in "$@"; do
    f=$(cat "/proc/$p/stat" 2>/dev/null) || continue
    read -ra a <<<"${f##*) }" # from field 3 (state): utime is field 14, stime 15
    u=$((u + a[11])) s=$((s + a[12]))
  done
  echo "$u $s"
}
cpustat() { grep -E '^cpu[01] ' /proc/stat | awk '{printf "%s %s ", $5+$6, $2+$3+$4+$5+$6+$7+$8+$9}'; }

EAL=(--no-huge -m 512 --no-pci --no-shconf)
TPMD=(env "RUNTIME_DIRECTORY=$W/dpdk-run" dpdk-testpmd)

gen_cmd() { # sets CMD
  case "$GEN" in
  pktgen) # its transmit core 0 pins itself to CPU0
    CMD=(ip netns exec "$NS_G" "$ROOT/target/release/pktgen" --port "xdp:$IF_G" --src-mac "$MAC_G" --dst-mac "$MAC_S"
      --src-ip 198.18.1.1 --dst-ip 198.18.1.2 --src-port 9 --dst-port 9 --size 60 --duration 3600) ;;
  tpmd-afpacket) # forwarding lcore 0 on CPU0, idle main lcore on CPU1
    CMD=(ip netns exec "$NS_G" "${TPMD[@]}" -l "0,1" --main-lcore 1 "${EAL[@]}" --file-prefix "rpxcg$$"
      --vdev "net_af_packet0,iface=$IF_G" -- --forward-mode=txonly "--eth-peer=0,$MAC_S" --txpkts=60
      --total-num-mbufs=16384 --stats-period 1) ;;
  *) die "GEN=$GEN: pktgen or tpmd-afpacket" ;;
  esac
}

fwd_cmd() { # forwarder -> CMD; forwarding on CPU1
  local io=(--forward-mode=io --total-num-mbufs=16384 --stats-period 1)
  local tp=(ip netns exec "$NS_X" "${TPMD[@]}" -l "0,1" --main-lcore 0 "${EAL[@]}" --file-prefix "rpxcx$$")
  case "$1" in
  rawpkt-xdp) # 1 core: the worker pins itself to CPU1, the stats thread sleeps
    CMD=(ip netns exec "$NS_X" "$ROOT/target/release/l2-xconnect"
      --port-a "xdp:$IF_XA,rule=any" --port-b "xdp:$IF_XB,rule=any" --stats-interval 1) ;;
  tpmd-afxdp)
    CMD=("${tp[@]}" --vdev "net_af_xdp0,iface=$IF_XA,start_queue=0,queue_count=1"
      --vdev "net_af_xdp1,iface=$IF_XB,start_queue=0,queue_count=1" -- "${io[@]}") ;;
  tpmd-afpacket)
    CMD=("${tp[@]}" --vdev "net_af_packet0,iface=$IF_XA" --vdev "net_af_packet1,iface=$IF_XB" -- "${io[@]}") ;;
  *) die "unknown forwarder $1" ;;
  esac
}

measure() { # round napi_cpu forwarder
  local round=$1 napi=$2 fwd=$3 name="$3@napi$2.r$1" fpid gpid
  topology_up
  fwd_cmd "$fwd"
  start "$W/logs/$name.fwd.log" "${CMD[@]}"
  fpid=$LAST
  if [ "$fwd" = rawpkt-xdp ]; then
    for _ in $(seq 100); do grep -qs '^forwarding:' "$W/logs/$name.fwd.log" && break; sleep 0.1; done
    grep -q '^forwarding:' "$W/logs/$name.fwd.log" || { echo "!! $name: l2-xconnect did not come up"; stop_all; return; }
  else
    sleep 4
  fi
  gen_cmd
  start "$W/logs/$name.gen.log" "${CMD[@]}"
  gpid=$LAST
  sleep 1
  pin_napi "$napi"
  sleep "$WARMUP"
  if ! kill -0 "$fpid" 2>/dev/null || ! kill -0 "$gpid" 2>/dev/null; then
    echo "!! $name: a process died; see $W/logs/$name.*.log"
    stop_all
    return
  fi
  local napis e t0 t1 c0="" c1="" k0 k1 f0 f1 g0 g1 n0 n1
  read -ra napis <<<"$(napi_pids | tr '\n' ' ')"
  for e in "${ENDS[@]}"; do c0+="$(counters "$e") "; done
  k0=$(cpustat) f0=$(ticks "$fpid") g0=$(ticks "$gpid") n0=$(ticks "${napis[@]}")
  t0=$(date +%s.%N)
  sleep "$WINDOW"
  t1=$(date +%s.%N)
  k1=$(cpustat) f1=$(ticks "$fpid") g1=$(ticks "$gpid") n1=$(ticks "${napis[@]}")
  for e in "${ENDS[@]}"; do c1+="$(counters "$e") "; done
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$napi" "$fwd" "$t0" "$t1" "$c0" "$c1" "$k0" "$k1" \
    "$f0 $f1 $g0 $g1 $n0 $n1" "$(cut -d' ' -f1 /proc/loadavg)" >>"$RESULTS"
  { # (not into the tools' logs: they write at their own offsets)
    echo "napi threads: $(for p in "${napis[@]}"; do echo -n "$(cat /proc/"$p"/comm 2>/dev/null)@$(taskset -pc "$p" 2>/dev/null | awk -F': ' '{print $2}') "; done)"
    ip -n "$NS_X" -d link show "$IF_XA" | grep -Eo 'prog/xdp[a-z]* id [0-9]+' || echo "no XDP on $IF_XA"
  } >"$W/logs/$name.info.log"
  stop_all
  python3 "$W/summary.py" "$RESULTS" --last
}

cat >"$W/xdp_drop.c" <<'EOF'
#include <linux/bpf.h>
__attribute__((section("xdp"), used)) int xdp_drop(struct xdp_md *ctx) { return XDP_DROP; }
char _license[] __attribute__((section("license"), used)) = "GPL";
EOF
clang -O2 -target bpf -I"/usr/include/$(uname -m)-linux-gnu" -c "$W/xdp_drop.c" -o "$W/xdp_drop.o"

cat >"$W/summary.py" <<'EOF'
import os, statistics, sys
CLK = os.sysconf("SC_CLK_TCK")
rows = []
for line in open(sys.argv[1]):
    f = line.rstrip('\n').split('\t')
    rnd, napi, fwd, t0, t1 = f[0], f[1], f[2], float(f[3]), float(f[4])
    a, b = [int(x) for x in f[5].split()], [int(x) for x in f[6].split()]
    k0, k1 = [int(x) for x in f[7].split()], [int(x) for x in f[8].split()]
    t = [int(x) for x in f[9].split()]
    if len(t) == 6:  # results of the first version of this script: no user/system split
        t = [v for x in t for v in (None, x)]
    fau, fas, fbu, fbs, gau, gas, gbu, gbs, nau, nas, nbu, nbs = t
    fa, fb, ga, gb, na, nb = ((u or 0) + s for u, s in [(fau, fas), (fbu, fbs), (gau, gas), (gbu, gbs), (nau, nas), (nbu, nbs)])
    dt = t1 - t0
    d = [(y - x) / dt / 1e6 for x, y in zip(a, b)]  # 4 ends x (rx rxd tx txd), Mpps
    # ends: g, xa, xb, s
    cpu = []
    for i in (0, 1):
        idle, tot = k1[2 * i] - k0[2 * i], k1[2 * i + 1] - k0[2 * i + 1]
        cpu.append(100 * (tot - idle) / max(tot, 1))
    # per end (g, xa, xb, s): rx, rx_dropped, tx, tx_dropped
    # xb_txd: frames the forwarder sent that the sink's full veth ring refused (no back-pressure)
    rows.append(dict(rnd=rnd, napi=napi, fwd=fwd, sink=d[12], xcin=d[4] - d[5], xa_rxd=d[5],
                     offered=d[2] + d[3], xb_tx=d[10], fwdcpu=100 * (fb - fa) / CLK / dt,
                     fwdusr=None if fau is None else 100 * (fbu - fau) / CLK / dt, xb_txd=d[11],
                     gencpu=100 * (gb - ga) / CLK / dt, napicpu=100 * (nb - na) / CLK / dt,
                     cpu0=cpu[0], cpu1=cpu[1], load=f[10]))
if '--last' in sys.argv:
    r = rows[-1]
    print(f"   {r['fwd']}@napi{r['napi']} round {r['rnd']}: sink {r['sink']:.3f} Mpps, xc in {r['xcin']:.3f}, "
          f"xa rx_dropped {r['xa_rxd']:.3f}, offered {r['offered']:.3f}; CPU% fwd {r['fwdcpu']:.0f} "
          f"(user {r['fwdusr'] or 0:.0f}) "
          f"gen {r['gencpu']:.0f} napi {r['napicpu']:.0f}, cpu0 {r['cpu0']:.0f} cpu1 {r['cpu1']:.0f}; load {r['load']}")
    sys.exit(0)
def med(k, rs):
    return statistics.median(r[k] for r in rs)
def user(rs):
    return '–' if any(r['fwdusr'] is None for r in rs) else f"{med('fwdusr', rs):.0f}"
print('| forwarder | NAPI threads on | n | sink Mpps min | **sink Mpps median** | max | xc in Mpps | xa rx_dropped Mpps | xb tx_dropped Mpps | offered Mpps | fwd CPU % (user) | gen CPU % | NAPI CPU % | CPU0 / CPU1 busy % |')
print('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
names = {'rawpkt-xdp': 'rawpkt l2-xconnect, 2x xdp:', 'tpmd-afxdp': 'testpmd io, 2x net_af_xdp',
         'tpmd-afpacket': 'testpmd io, 2x net_af_packet'}
order = []
for r in rows:
    if (r['napi'], r['fwd']) not in order:
        order.append((r['napi'], r['fwd']))
for napi, fwd in sorted(order, key=lambda o: (-int(o[0]), list(names).index(o[1]) if o[1] in names else 9)):
    rs = [r for r in rows if r['napi'] == napi and r['fwd'] == fwd]
    s = sorted(r['sink'] for r in rs)
    where = f"CPU{napi}" + (" (with the forwarder)" if napi == '1' else " (with the generator)")
    print(f"| {names.get(fwd, fwd)} | {where} | {len(rs)} | {s[0]:.3f} | **{statistics.median(s):.3f}** | {s[-1]:.3f} | "
          f"{med('xcin', rs):.3f} | {med('xa_rxd', rs):.3f} | {med('xb_txd', rs):.3f} | "
          f"{med('offered', rs):.3f} | {med('fwdcpu', rs):.0f} ({user(rs)}) | "
          f"{med('gencpu', rs):.0f} | {med('napicpu', rs):.0f} | {med('cpu0', rs):.0f} / {med('cpu1', rs):.0f} |")
EOF

echo "== build $(date +%T)"
(cd "$ROOT" && cargo build --release -p rawpkt-tools --bin pktgen --bin l2-xconnect 2>&1 | tail -1)

exec 9>"$LOCK"
if ! flock -n 9; then
  echo "== waiting for $LOCK (another measurement is running) $(date +%T)"
  flock 9
fi
echo "== measuring $(date +%T); load: $(uptime)"
echo "   generator $GEN on CPU0; forwarders on CPU1; ROUNDS=$ROUNDS WINDOW=$WINDOW s WARMUP=$WARMUP s; logs $W/logs"
for round in $(seq 1 "$ROUNDS"); do
  for napi in $NAPI_CPUS; do
    # Alternate the forwarders' order between rounds, so that none always runs first.
    read -ra fwds <<<"$FORWARDERS"
    if [ $((round % 2)) = 0 ]; then
      rev=()
      for ((i = ${#fwds[@]} - 1; i >= 0; i--)); do rev+=("${fwds[$i]}"); done
      fwds=("${rev[@]}")
    fi
    for fwd in "${fwds[@]}"; do
      echo "=== round $round: $fwd, NAPI threads on CPU$napi ($(date +%T))"
      measure "$round" "$napi" "$fwd"
    done
  done
done
topology_down
echo "== done $(date +%T); load: $(uptime)"
flock -u 9
echo
echo "generator: $GEN, 60-byte frames, $ROUNDS rounds x ${WINDOW} s windows; medians over rounds"
python3 "$W/summary.py" "$RESULTS"
