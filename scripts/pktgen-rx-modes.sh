#!/usr/bin/env bash
# pktgen TX -> RX in every receive mode (--rx-mode), on the model pair (model: ports, the model
# NIC on a CPU of its own) and through the model library (mlx5:mlx5_0/1 -> mlx5:mlx5_1/1, the
# library standing in for rdma-core, its NIC thread on the last CPU and pktgen on the first, as
# tests/mlx5_model.rs runs it), alternating modes and ports within each round so that the VM's
# drift falls on every mode alike.
#
# Usage: scripts/pktgen-rx-modes.sh [--rounds N] [--duration S]
#   --rounds N     rounds of one run per mode and port kind (default 5)
#   --duration S   seconds per run (default 3)
# Prints one JSON line per run (kind, rx_mode, ran, round, rx_mpps, tx_mpps, lost, load1) and
# then a Markdown table: the median and range of rx_mpps per mode and kind.
set -euo pipefail

ROUNDS=5
DURATION=3
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=${2:?--rounds needs a number}; shift 2 ;;
        --duration) DURATION=${2:?--duration needs seconds}; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) echo "pktgen-rx-modes.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$ROUNDS" in ''|*[!0-9]*|0) echo "pktgen-rx-modes.sh: --rounds must be a positive integer" >&2; exit 2 ;; esac

cd "$(dirname "$0")/.."
echo "== building pktgen and the model library (release)" >&2
cargo build -q --release -p rawpkt-tools --bin pktgen >&2
cargo build -q --release -p rawpkt-model-verbs >&2
target="${CARGO_TARGET_DIR:-target}"
PKTGEN="$target/release/pktgen"
LIB="$(cd "$target/release" && pwd)/librawpkt_model_verbs.so"
MODES=(cyclic compressed striding striding+compressed)
# The first and last CPU this script may run on.
read -r FIRST LAST < <(python3 -c 'import os; c = os.sched_getaffinity(0); print(min(c), max(c))')

RESULTS=$(mktemp)
ERR=$(mktemp)
trap 'rm -f "$RESULTS" "$ERR"' EXIT

# one <kind> <mode> <round>: one run, one JSON line; "ran" is what pktgen says ran where it says
# so (model: ports: a compressed mode without compressed sessions), else the mode asked for.
one() {
    local kind=$1 mode=$2 round=$3 out load
    load=$(cut -d' ' -f1 /proc/loadavg)
    if [ "$kind" = model ]; then
        out=$("$PKTGEN" --rx-mode "$mode" --duration "$DURATION" --json 2>"$ERR" | tail -n 1)
    else
        out=$(RAWPKT_LIBIBVERBS=$LIB RAWPKT_LIBMLX5=$LIB RAWPKT_MODEL_CPU=$LAST taskset -c "$FIRST" \
            "$PKTGEN" --port mlx5:mlx5_0/1 --rx-port mlx5:mlx5_1/1 --rx-mode "$mode" \
            --duration "$DURATION" --json 2>"$ERR" | tail -n 1)
    fi
    [ -n "$out" ] || { cat "$ERR" >&2; echo "pktgen-rx-modes.sh: pktgen ($kind, $mode) printed no summary" >&2; exit 1; }
    python3 -c '
import json, sys
s = json.loads(sys.argv[1])
ran = sys.argv[3]
for l in open(sys.argv[6]):
    if "what ran was " in l:
        ran = l.strip().rsplit("what ran was ", 1)[1]
print(json.dumps({"kind": sys.argv[2], "rx_mode": sys.argv[3], "ran": ran, "round": int(sys.argv[4]),
                  "rx_mpps": s["rx_mpps"], "tx_mpps": s["tx_mpps"], "lost": s["lost"],
                  "load1": float(sys.argv[5])}))' "$out" "$kind" "$mode" "$round" "$load" "$ERR"
}

for round in $(seq 1 "$ROUNDS"); do
    # Each round starts one mode later, so that no mode always runs first.
    for i in 0 1 2 3; do
        mode=${MODES[$(((i + round) % 4))]}
        for kind in model mlx5; do
            one "$kind" "$mode" "$round" | tee -a "$RESULTS"
        done
    done
done
python3 - "$RESULTS" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
loads = [r["load1"] for r in runs]
print(f"\n{len(runs)} runs, load average (1 min) {min(loads):.1f}-{max(loads):.1f}\n")
print("| rx mode | model pair: Mpps received, median (range) | model library: Mpps received, median (range) |")
print("|---|---:|---:|")
for mode in ["cyclic", "compressed", "striding", "striding+compressed"]:
    cells = []
    for kind in ["model", "mlx5"]:
        v = [r["rx_mpps"] for r in runs if r["rx_mode"] == mode and r["kind"] == kind]
        lost = sum(r["lost"] for r in runs if r["rx_mode"] == mode and r["kind"] == kind)
        ran = sorted({r["ran"] for r in runs if r["rx_mode"] == mode and r["kind"] == kind} - {mode})
        note = (f", {lost} lost" if lost else "") + (f", ran as {'/'.join(ran)}" if ran else "")
        cells.append(f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f}){note}")
    print(f"| {mode} | {cells[0]} | {cells[1]} |")
EOF
