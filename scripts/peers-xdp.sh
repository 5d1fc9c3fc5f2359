#!/usr/bin/env bash
# peers-xdp.sh -- rawpkt's AF_XDP backend against the peer tools, side by side in one run, on the
# shared veth testbed (../shared/testbed: veth-testbed.sh builds rq-gen:ga0 <=> rq-sink:sa0,
# bench.py measures a window and reads the counters; neither is copied here).
#
#   TX: generator on CPU0 (ga0)  -> sa0 with an XDP_DROP program (native: NAPI thread on CPU1;
#       generic: the drop runs on the sender's CPU, the only sink trafgen survives, pitfall P1)
#       rawpkt pktgen --port xdp:ga0 | trafgen | testpmd txonly net_af_xdp | testpmd txonly net_af_packet
#       Mpps = sa0 rx_packets per second (frames the sink's XDP program saw).
#   RX: testpmd txonly net_af_xdp on CPU0 -> receiver on sa0, CPU1 (shared with sa0's NAPI thread)
#       rawpkt rx-sink xdp:sa0 | testpmd rxonly net_af_xdp | testpmd rxonly net_af_packet
#       Mpps = what the receiver itself reports per second (rawpkt "rx-pps", testpmd "Rx-pps"),
#       median over the window, since the sink interface's counter also counts frames dropped
#       before reaching the application.
#
# Cases are interleaved (every case once, then again, REPS times) because the host drifts by
# +-20 % between batches (peers-results.md 4.4). Needs root, and:
#   apt-get install -y --no-install-recommends netsniff-ng dpdk dpdk-dev clang ethtool python3
# Env: REPS=3 WINDOW=10 TB=<testbed dir> ONLY=<regex of the cases to run, e.g. 'tx-.*generic'>
# PKTGEN_ARGS=<extra pktgen arguments>. Results: /tmp/rq-xdp/results.jsonl, logs in /tmp/rq-xdp/logs.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TB=${TB:-$ROOT/../shared/testbed}
REPS=${REPS:-3}
WINDOW=${WINDOW:-10}
W=/tmp/rq-xdp
OUT=$W/results.jsonl

[ "$(id -u)" = 0 ] || { echo "peers-xdp.sh: needs root (namespaces, XDP, AF_XDP)" >&2; exit 1; }
[ -x "$TB/veth-testbed.sh" ] && [ -f "$TB/bench.py" ] || {
  echo "peers-xdp.sh: no testbed in $TB (veth-testbed.sh, bench.py); set TB=" >&2; exit 1; }
for t in trafgen dpdk-testpmd clang ethtool python3 taskset; do
  command -v "$t" >/dev/null || {
    echo "peers-xdp.sh: missing $t; apt-get install -y --no-install-recommends netsniff-ng dpdk dpdk-dev clang ethtool" >&2
    exit 1; }
done
rm -rf "$W"; mkdir -p "$W/logs" "$W/dpdk-run"

(cd "$ROOT" && cargo build --release -p rawpkt-tools --bin pktgen --bin rx-sink 2>&1 | tail -1)
PKTGEN=$ROOT/target/release/pktgen
SINK=$ROOT/target/release/rx-sink
clang -O2 -g -target bpf -I"/usr/include/$(uname -m)-linux-gnu" -c "$TB/xdp_prog.c" -o "$W/xdp_prog.o"

SA0_MAC=02:52:51:01:00:02
EAL="--no-huge -m 512 --no-pci --no-shconf"
TPMD="env RUNTIME_DIRECTORY=$W/dpdk-run dpdk-testpmd"
TPMD_TX="-- --forward-mode=txonly --eth-peer=0,$SA0_MAC --txpkts=60 --total-num-mbufs=16384 --stats-period 1 --auto-start"
TPMD_RX="-- --forward-mode=rxonly --total-num-mbufs=16384 --stats-period 1 --auto-start"

# Generators on CPU0 (testpmd: forwarding lcore 0, idle main lcore 1; pktgen pins its core 0).
G_RAWPKT="ip netns exec rq-gen $PKTGEN --port xdp:ga0 --src-mac 02:52:51:01:00:01 --dst-mac $SA0_MAC --src-ip 198.18.0.1 --dst-ip 198.18.0.2 --src-port 9 --dst-port 9 --duration 3600 ${PKTGEN_ARGS:---burst 256}"
G_TRAFGEN="ip netns exec rq-gen trafgen -o ga0 -i $TB/trafgen-onelink-64.cfg -P 1 --no-sock-mem -Q"
G_AFX="ip netns exec rq-gen $TPMD -l 0,1 --main-lcore 1 $EAL --file-prefix rqgen --vdev net_af_xdp0,iface=ga0,start_queue=0,queue_count=1 $TPMD_TX"
G_AFP="ip netns exec rq-gen $TPMD -l 0,1 --main-lcore 1 $EAL --file-prefix rqgen --vdev net_af_packet0,iface=ga0 $TPMD_TX"
# Receivers on CPU1 (testpmd: forwarding lcore 1, main lcore 0).
R_RAWPKT="ip netns exec rq-sink $SINK xdp:sa0 1"
R_AFX="ip netns exec rq-sink $TPMD -l 0,1 --main-lcore 0 $EAL --file-prefix rqsink --vdev net_af_xdp0,iface=sa0,start_queue=0,queue_count=1 $TPMD_RX"
R_AFP="ip netns exec rq-sink $TPMD -l 0,1 --main-lcore 0 $EAL --file-prefix rqsink --vdev net_af_packet0,iface=sa0 $TPMD_RX"

DROP_NATIVE="ip netns exec rq-sink ip link set dev sa0 xdpdrv obj $W/xdp_prog.o sec xdp && $TB/veth-testbed.sh pin-napi >/dev/null"
DROP_GENERIC="ip netns exec rq-sink ip link set dev sa0 xdpgeneric obj $W/xdp_prog.o sec xdp"

bench() {
  python3 "$TB/bench.py" --reps 1 --window "$WINDOW" --json "$OUT" --logdir "$W/logs" \
    --count rq-sink:sa0 --count rq-gen:ga0 "$@" 2>&1 | grep -E 'SUMMARY|!!' || true
}

run_case() {
  RQ_NAPI_CPU=1 "$TB/veth-testbed.sh" up >/dev/null 2>&1
  local n="$1@$2"
  case "$n" in
  tx-rawpkt-xdp@native)   bench --name "$n" --gen "$G_RAWPKT" --warmup 4 --setup "$DROP_NATIVE" ;;
  tx-trafgen@native)      bench --name "$n" --gen "$G_TRAFGEN" --setup "$DROP_NATIVE" ;;
  tx-tpmd-afxdp@native)   bench --name "$n" --gen "$G_AFX" --warmup 4 --setup "$DROP_NATIVE" ;;
  tx-tpmd-afpacket@native) bench --name "$n" --gen "$G_AFP" --warmup 4 --setup "$DROP_NATIVE" ;;
  tx-rawpkt-xdp@generic)  bench --name "$n" --gen "$G_RAWPKT" --warmup 4 --setup "$DROP_GENERIC" ;;
  tx-trafgen@generic)     bench --name "$n" --gen "$G_TRAFGEN" --setup "$DROP_GENERIC" ;;
  tx-tpmd-afxdp@generic)  bench --name "$n" --gen "$G_AFX" --warmup 4 --setup "$DROP_GENERIC" ;;
  tx-tpmd-afpacket@generic) bench --name "$n" --gen "$G_AFP" --warmup 4 --setup "$DROP_GENERIC" ;;
  rx-rawpkt-xdp@*)        bench --name "$n" --fwd "$R_RAWPKT" --fwd-warmup 2 --gen "$G_AFX" --warmup 4 ;;
  rx-tpmd-afxdp@*)        bench --name "$n" --fwd "$R_AFX" --fwd-warmup 4 --gen "$G_AFX" --warmup 4 ;;
  rx-tpmd-afpacket@*)     bench --name "$n" --fwd "$R_AFP" --fwd-warmup 4 --gen "$G_AFX" --warmup 4 ;;
  *) echo "unknown case $n" >&2; return 1 ;;
  esac
}

CASES=(
  "tx-rawpkt-xdp native" "tx-trafgen native" "tx-tpmd-afxdp native" "tx-tpmd-afpacket native"
  "tx-rawpkt-xdp generic" "tx-trafgen generic" "tx-tpmd-afxdp generic" "tx-tpmd-afpacket generic"
  "rx-rawpkt-xdp afxdp-gen" "rx-tpmd-afxdp afxdp-gen" "rx-tpmd-afpacket afxdp-gen"
)
for rep in $(seq 1 "$REPS"); do
  for c in "${CASES[@]}"; do
    [[ "$c" =~ ${ONLY:-.} ]] || continue
    set -- $c
    echo "=== rep $rep: $1 ($2) $(date +%T)"
    # bench.py names its logs NAME.{gen,fwd}.0.log: keep one per repetition.
    run_case "$1" "$2"
    for f in "$W"/logs/"$1@$2".*.0.log; do [ -e "$f" ] && mv "$f" "${f%.0.log}.r$rep.log"; done
  done
done
RQ_NAPI_CPU=1 "$TB/veth-testbed.sh" down >/dev/null 2>&1 || true

python3 - "$OUT" "$W/logs" <<'EOF'
import json, re, statistics, sys, glob, os
out, logs = sys.argv[1], sys.argv[2]
rows = {}
for line in open(out):
    r = json.loads(line)
    rows.setdefault(r['name'], []).append(r)
def app_rate(path):
    # per-second receive rates the application printed; drop the first 4 (warm-up) and the last
    # (cut by SIGINT), keep the window's
    txt = open(path, errors='replace').read()
    v = [float(x) for x in re.findall(r'(?:rx-pps:|Rx-pps:)\s+([0-9.]+)', txt)]
    v = v[4:-1] if len(v) > 6 else v
    return statistics.median(v) if v else 0.0
print()
print('| case | sink / generator | n | min | median Mpps | max | tool CPU % | Mpps per tool CPU | notes |')
print('|---|---|---|---|---|---|---|---|---|')
for name in sorted(rows, key=lambda n: (n.split('-')[0] != 'tx', n.split('@')[1], n)):
    rs = rows[name]
    if name.startswith('rx-'):
        vals = sorted(app_rate(p) for p in sorted(glob.glob(os.path.join(logs, name + '.fwd.r*.log'))))
        note = 'receiver-reported; sa0 rx %.3f Mpps, rx_drop %.3f' % (
            statistics.median(r['counters']['rq-sink:sa0']['rx'] for r in rs) / 1e6,
            statistics.median(r['counters']['rq-sink:sa0']['rxd'] for r in rs) / 1e6)
        sink = 'gen: testpmd txonly net_af_xdp'
    else:
        vals = sorted(r['pps'] for r in rs)
        note = 'ga0 tx+tx_drop %.3f Mpps' % (statistics.median(
            r['counters']['rq-gen:ga0']['tx'] + r['counters']['rq-gen:ga0']['txd'] for r in rs) / 1e6)
        sink = 'sink: XDP_DROP ' + name.split('@')[1]
    role = 'fwd' if name.startswith('rx-') else 'gen'
    # CPU the tool's own processes got in the window (the host may be shared: a tool that got
    # half a core is not half as fast)
    cpus = [r['proc_cpu_pct'].get(role, 0) for r in rs]
    cpu = statistics.median(cpus) if cpus else 0
    if not vals or max(vals) == 0:
        print(f'| {name.split("@")[0]} | {sink} | {len(vals)} | – | **0 (failed/aborted)** | – | – | – | see logs |')
        continue
    if role == 'gen':
        per = statistics.median(r['pps'] / max(r['proc_cpu_pct'].get(role, 0), 1) * 100 for r in rs) / 1e6
        per = f'{per:.3f}'
    else:
        per = '–'
    print(f'| {name.split("@")[0]} | {sink} | {len(vals)} | {vals[0]/1e6:.3f} | **{statistics.median(vals)/1e6:.3f}** | {vals[-1]/1e6:.3f} | {cpu:.0f} | {per} | {note} |')

# The host drifts between repetitions more than the tools differ: compare within a repetition.
# Each repetition ran every case back to back, so rawpkt's i-th result pairs with a peer's i-th.
print()
print('| paired (same repetition) | n | rawpkt / peer, per repetition | median ratio | rawpkt ahead in |')
print('|---|---|---|---|---|')
def rates(name):
    if name.startswith('rx-'):
        return [app_rate(p) for p in sorted(glob.glob(os.path.join(logs, name + '.fwd.r*.log')))]
    return [r['pps'] for r in rows[name]]
for name in sorted(rows):
    kind, rest = name.split('-', 1)
    tool, mode = rest.split('@')
    if tool == 'rawpkt-xdp':
        continue
    mine = f'{kind}-rawpkt-xdp@{mode}'
    if mine not in rows:
        continue
    a, b = rates(mine), rates(name)
    pairs = [(x, y) for x, y in zip(a, b) if y > 0]
    if not pairs:
        continue
    ratios = [x / y for x, y in pairs]
    ahead = sum(1 for r in ratios if r > 1)
    print(f'| {kind} {mode}: rawpkt vs {tool} | {len(ratios)} | ' + ' '.join(f'{r:.2f}' for r in ratios)
          + f' | **{statistics.median(ratios):.2f}** | {ahead}/{len(ratios)} |')
EOF
