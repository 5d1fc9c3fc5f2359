#!/usr/bin/env bash
# pktgen TX-only on a model port against the DV TX bench with the same model device: how much of
# the driver's rate the generator keeps once it builds real frames (templates, stamps, pacing,
# counters). Both run one pinned sending thread on the first allowed CPU and the model NIC's
# thread on the last, batch 32, 60-byte frames, the default (ConnectX-5) model:
#   - the bench: `dv_burst threaded --secs S`, its `dv_tx` row (after a 200 ms warm-up);
#   - pktgen: `pktgen --port model:vsbench/0 --duration S --json`, the summary's tx_mpps.
# The two alternate, N pairs in one run, each pair starting with the other one than the last,
# so that the machine's drift (the VM's fast and slow phases, other jobs) falls on both alike.
# One line per pair with the load average, then the ratios' median, least and most.
#
# Usage: scripts/pktgen-vs-bench.sh [--pairs N] [--secs S]     (default 5 pairs of 3 s)
# Nothing is asserted: wall-clock rates are the machine's, not the code's (tests do not check
# them); docs/benchmarks.md records what a run gave, with the load average.
set -euo pipefail

PAIRS=5
SECS=3
while [ $# -gt 0 ]; do
    case "$1" in
        --pairs) PAIRS=${2:?--pairs needs a number}; shift 2 ;;
        --secs) SECS=${2:?--secs needs a number}; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
        *) echo "pktgen-vs-bench.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$PAIRS" in ''|*[!0-9]*|0) echo "pktgen-vs-bench.sh: --pairs must be a positive integer" >&2; exit 2 ;; esac
case "$SECS" in ''|*[!0-9]*|0) echo "pktgen-vs-bench.sh: --secs must be a positive integer" >&2; exit 2 ;; esac
command -v python3 >/dev/null 2>&1 || { echo "pktgen-vs-bench.sh: python3 is needed to read the JSON lines" >&2; exit 1; }

cd "$(dirname "$0")/.."
echo "== building pktgen (release) and the dv_burst bench (bench profile)" >&2
cargo build -q --release --bin pktgen >&2
PKTGEN="${CARGO_TARGET_DIR:-target}/release/pktgen"
build_log=$(cargo bench -p rawpkt --features internals --bench dv_burst --no-run 2>&1) || { echo "$build_log" >&2; exit 1; }
BENCH=$(printf '%s\n' "$build_log" | sed -n 's/.*Executable .*(\(.*dv_burst-[0-9a-f]*\))$/\1/p' | tail -n 1)
if [ -z "$BENCH" ] || [ ! -x "$BENCH" ]; then
    BENCH=$(find "${CARGO_TARGET_DIR:-target}/release/deps" -maxdepth 1 -type f -name 'dv_burst-*' -perm -u+x \
        ! -name '*.d' -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -n 1 | cut -d' ' -f2-)
fi
[ -n "$BENCH" ] && [ -x "$BENCH" ] || { echo "pktgen-vs-bench.sh: no dv_burst bench binary under target/release/deps" >&2; exit 1; }

load() { cut -d' ' -f1 /proc/loadavg; }
# Each prints its Mpps, or says why not on stderr and fails.
bench() {
    local out
    out=$(RAWPKT_BENCH_DEVICE=cx5 "$BENCH" threaded --secs "$SECS" 2>&1) ||
        { echo "pktgen-vs-bench.sh: the bench failed: $out" >&2; return 1; }
    python3 -c 'import json, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
print("%.3f" % next(r["mpps"] for r in rows if r.get("bench") == "dv_tx"))' <<<"$out"
}
pktgen() {
    local out
    out=$("$PKTGEN" --port model:vsbench/0 --duration "$SECS" --json 2>&1) ||
        { echo "pktgen-vs-bench.sh: pktgen failed: $out" >&2; return 1; }
    grep '"type":"summary"' <<<"$out" | python3 -c 'import json, sys; print("%.3f" % json.load(sys.stdin)["tx_mpps"])'
}

ratios=()
for k in $(seq "$PAIRS"); do
    if [ $((k % 2)) = 1 ]; then
        b=$(bench); p=$(pktgen)
    else
        p=$(pktgen); b=$(bench)
    fi
    r=$(awk -v p="$p" -v b="$b" 'BEGIN { printf "%.3f", (b > 0) ? p / b : 0 }')
    ratios+=("$r")
    echo "pair $k  load $(load)  dv_tx $b Mpps  pktgen $p Mpps  ratio $r"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ r[NR] = $1 } END {
    m = (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
    printf "pktgen / dv_tx over %d pairs: median %.3f, least %.3f, most %.3f\n", NR, m, r[1], r[NR] }'
