#!/usr/bin/env bash
# What pktgen's pacing reaches on this machine at this moment: the figures its tests do not
# assert, since they hold only where the sender and the model's thread have CPUs to spare (the
# tests check counts, order and "never faster than asked", and the pacer's logic on a simulated
# clock). On the model pair, release build:
#   - `--rate 1M --duration 2`: the rate achieved;
#   - `--rate 1M --shape poisson --duration 1`: the mean gap between departures, their
#     coefficient of variation over all gaps and over the gaps between on-time departures, and
#     the share of departures late by more than 2 µs;
#   - a timed replay at 1x and 10x of a file of 1000 frames 200 µs apart: the median gap between
#     the frames as captured (by their device receive timestamps), scaled back, against 200 µs;
#   - `--search` against model ports that take 20 000 frames a second (trials of 1 s, 0.5 %
#     loss allowed): the rate found, against the known answer 21 106.
#
# Usage: scripts/pktgen-pacing.sh [--runs N]     (default 3)
# Prints one line per run with the load average; nothing is asserted.
set -euo pipefail

RUNS=3
while [ $# -gt 0 ]; do
    case "$1" in
        --runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "pktgen-pacing.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$RUNS" in ''|*[!0-9]*|0) echo "pktgen-pacing.sh: --runs must be a positive integer" >&2; exit 2 ;; esac

cd "$(dirname "$0")/.."
cargo build -q --release --bin pktgen >&2
PKTGEN="${CARGO_TARGET_DIR:-target}/release/pktgen"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
load() { cut -d' ' -f1 /proc/loadavg; }
summary() { tail -n 1 | python3 -c "$1"; }

# The replay's source: 1000 numbered 60-byte frames, 200 µs apart (nanosecond pcap).
python3 - "$TMP/src.pcap" <<'PY'
import struct, sys
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<IHHiIII", 0xa1b23c4d, 2, 4, 0, 0, 65535, 1))
    for k in range(1000):
        frame = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x88, 0xb5]) + k.to_bytes(4, "big") + bytes(42)
        t = 1_000_000_000 + k * 200_000
        f.write(struct.pack("<IIII", t // 10**9, t % 10**9, len(frame), len(frame)) + frame)
PY
median_gap() {
    python3 - "$1" "$2" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
off, ts = 24, []
while off + 16 <= len(data):
    s, ns, incl, _ = struct.unpack_from("<IIII", data, off)
    ts.append(s * 10**9 + ns)
    off += 16 + incl
gaps = sorted(b - a for a, b in zip(ts, ts[1:]))
print(f"{gaps[len(gaps) // 2] * int(sys.argv[2]) / 1e3:.1f}" if gaps else "none")
PY
}

for run in $(seq "$RUNS"); do
    rate=$("$PKTGEN" --port model:pace0/0 --rate 1M --duration 2 --json 2>/dev/null |
        summary 'import json, sys; print(json.load(sys.stdin)["tx_mpps"])')
    echo "run $run  load $(load)  --rate 1M: $rate Mpps"
    "$PKTGEN" --rate 1M --shape poisson --duration 1 --json 2>/dev/null | summary '
import json, sys
t = json.load(sys.stdin)["streams"][0]
d = t["departures_ns"]
late = 100 * d["late"] / max(d["departures"], 1)
print("poisson 1M: %s Mpps, mean gap %.1f ns, cv %.3f, cv on time %.3f, %.1f %% late"
      % (t["tx_mpps"], d["mean"], d["cv"], d["cv_on_time"], late))' |
        sed "s/^/run $run  load $(load)  /"
    for x in 1 10; do
        "$PKTGEN" --pcap "$TMP/src.pcap" --pcap-speed "$x" --pcap-loops 1 --json --capture "$TMP/out.pcap" >/dev/null 2>&1
        echo "run $run  load $(load)  timed replay ${x}x: median gap $(median_gap "$TMP/out.pcap" "$x") µs (scaled back) against 200.0"
    done
    found=$(RAWPKT_MODEL_RX_PPS=20000 "$PKTGEN" --search --search-sizes 60 --trial 1 --resolution 2% \
        --loss-threshold 0.5 --json 2>/dev/null | summary 'import json, sys; print(json.load(sys.stdin)["rate_pps"])')
    echo "run $run  load $(load)  search against 20 000 frames/s: $found pps (answer 21106)"
done
