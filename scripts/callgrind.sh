#!/usr/bin/env bash
# Instructions per packet inside the DV datapath, counted by callgrind.
#
# Builds the dv_burst bench (bench profile = release + debug info), runs it in `stepped` mode
# (no model thread: tx_burst, nic.step(), rx_burst in one loop) twice under callgrind, once
# collecting only inside `<DvTxQueue as TxQueue>::tx_burst` and once only inside
# `<DvRxQueue as RxQueue>::rx_burst`. --toggle-collect counts a function inclusively (its callees
# too: completion polling, pool frees, RX refill), and nothing else is collected, so the run's
# total Ir divided by the packets the bench reports is instructions per packet.
#
# Usage: scripts/callgrind.sh [--iters N] [--annotate] [--xconnect] [--pktgen] [--device D] [--rx-mode M] [--json]
#   --iters N    bursts of 32 to run (default 20000, or $ITERS)
#   --annotate   also print callgrind_annotate's inclusive profile and hottest source lines
#   --xconnect   instead: the l2-xconnect loop (rx_burst then tx_burst of the same burst, one
#                pool; the bench's `stepped-xc` mode), counted inside `xconnect_burst`
#   --pktgen     instead: pktgen's send loop without the driver, TX-only on a model port (release
#                build, `--count` 10 x N packets: 200000 by default): counted inside
#                `worker::build_burst` (every stream's pacing, the share of the burst, the
#                buffers' allocation, the frames' templates and stamps, the counts published),
#                per packet sent. The model NIC runs on its own thread, so a few bursts find
#                the ring part full and are short: a figure moves by a few hundredths
#   --device D   cx5 (enhanced multi-packet send) or cx4 (one 64-byte SEND per packet, 18 inline
#                bytes); default: both
#   --rx-mode M  the receive queues of the bench (its --rx-mode, the QueueConfig fields
#                rx_striding and rx_cqe_compression): cyclic (default), compressed (CQE
#                compression), striding (a striding RQ: counted inside DvStridingRxQueue's
#                rx_burst) or striding+compressed; `dv_burst rx-modes` lists what a device has
#                (a ConnectX-4 has no striding RQ: said on stderr, and that device is skipped)
#   --portable   run the portable builds (RAWPKT_NO_SIMD=1, which the bench turns into
#                QueueConfig::cpu_vector off: no MOVBE, no AVX2), as a CPU without them would
#   --json       instead: every measurement (tx; rx and xconnect in every receive mode the
#                device has) on each device, one JSON line each: path, device, rx_mode (what
#                ran: `compressed` only where the device wrote compressed sessions),
#                rx_mode_asked, instr_per_pkt, ir, packets, iterations, batch, frame, target,
#                cpu (the builds that ran: movbe+avx2, movbe, avx2 or portable).
#                A mode the device lacks, or a run whose queue did not receive every frame in
#                order, is one line on stderr and no JSON line.
# Output files stay in target/callgrind/ (callgrind.tx.out, callgrind.rx.out) for
# `callgrind_annotate --inclusive=yes target/callgrind/callgrind.tx.out`.
set -euo pipefail

ITERS=${ITERS:-20000}
ANNOTATE=0
XCONNECT=0
PKTGEN=0
DEVICES="cx5 cx4"
RX_MODE=cyclic
JSON=0
while [ $# -gt 0 ]; do
    case "$1" in
        --rx-mode) RX_MODE=${2:?--rx-mode needs a mode}; shift 2 ;;
        --json) JSON=1; shift ;;
        --portable) export RAWPKT_NO_SIMD=1; shift ;;
        --iters) ITERS=${2:?--iters needs a number}; shift 2 ;;
        --annotate) ANNOTATE=1; shift ;;
        --xconnect) XCONNECT=1; shift ;;
        --pktgen) PKTGEN=1; shift ;;
        --device) DEVICES=${2:?--device needs cx4 or cx5}; shift 2 ;;
        -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
        *) echo "callgrind.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
case "$ITERS" in ''|*[!0-9]*) echo "callgrind.sh: --iters must be a positive integer" >&2; exit 2 ;; esac

# Targets, instructions per packet: TX on a ConnectX-5 25; RX with compressed CQEs, cyclic or
# striding, 25; the cross-connect on a ConnectX-5's best receive modes, the compressed ones, 55
# (on a ConnectX-4 the SEND path alone costs more); elsewhere TX 30, RX 40, cross-connect 80.
# target <path> <device> <rx mode>
target() {
    case "$1:$2:$3" in
        tx:cx5:*) echo 25 ;;
        tx:*) echo 30 ;;
        rx:*:compressed | rx:*:striding+compressed) echo 25 ;;
        rx:*) echo 40 ;;
        xconnect:cx5:compressed | xconnect:cx5:striding+compressed) echo 55 ;;
        xconnect:*) echo 80 ;;
    esac
}

die() { echo "callgrind.sh: error: $*" >&2; exit 1; }
verdict() { awk -v v="$1" -v t="$2" 'BEGIN { print (v <= t) ? "PASS" : "OVER" }'; }

# The builds the queues pick (`dv::cpu_has_movbe`, `dv::cpu_has_avx2`): the CPU's flags, unless
# RAWPKT_NO_SIMD rules them out (the bench's `cpu_vector`).
cpu_builds() {
    if [ -n "${RAWPKT_NO_SIMD:-}" ] && [ "$RAWPKT_NO_SIMD" != 0 ]; then echo portable; return; fi
    local flags b=""
    flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    case "$flags" in *" movbe "*) b=movbe ;; esac
    case "$flags" in *" avx2 "*) b=${b:+$b+}avx2 ;; esac
    echo "${b:-portable}"
}
CPU=$(cpu_builds)

command -v valgrind >/dev/null 2>&1 ||
    die "valgrind is not installed (Debian/Ubuntu: apt-get install valgrind)"
command -v cargo >/dev/null 2>&1 || die "cargo is not on PATH"

cd "$(dirname "$0")/.."
OUT_DIR=${OUT_DIR:-target/callgrind}
mkdir -p "$OUT_DIR"

# pktgen's send loop: instructions per packet inside build_burst, the driver left out.
if [ "$PKTGEN" = 1 ]; then
    TARGET=35
    COUNT=$((ITERS * 10))
    echo "== building pktgen (release)" >&2
    cargo build -q --release --bin pktgen >&2 || die "build failed"
    BIN="${CARGO_TARGET_DIR:-target}/release/pktgen"
    if command -v nm >/dev/null 2>&1; then
        syms=$(nm -C "$BIN" 2>/dev/null || true)
        grep -q 'pktgen::worker::build_burst$' <<<"$syms" ||
            die "no pktgen::worker::build_burst symbol in $BIN (inlined? it must stay #[inline(never)])"
    fi
    out="$OUT_DIR/callgrind.pktgen.out"
    echo "== callgrind: pktgen --port model:callgrind/0 --count $COUNT, collecting inside *worker::build_burst*" >&2
    valgrind --tool=callgrind --dump-instr=no --collect-atstart=no --toggle-collect='*worker::build_burst*' \
        --callgrind-out-file="$out" "$BIN" --port model:callgrind/0 --count "$COUNT" \
        >"$OUT_DIR/pktgen.log" 2>"$OUT_DIR/valgrind.pktgen.log" || { cat "$OUT_DIR/valgrind.pktgen.log" >&2; die "valgrind run (pktgen) failed"; }
    IR=$(sed -n 's/^totals: *\([0-9][0-9]*\).*/\1/p' "$out" | tail -n 1)
    [ -n "$IR" ] || IR=$(sed -n 's/^summary: *\([0-9][0-9]*\).*/\1/p' "$out" | tail -n 1)
    [ -n "$IR" ] && [ "$IR" -gt 0 ] || die "callgrind collected nothing inside build_burst ($out)"
    # "summary: 12.34s  tx N packets (...)"
    PK=$(sed -n 's/^summary: .* tx \([0-9][0-9]*\) packets.*/\1/p' "$OUT_DIR/pktgen.log" | tail -n 1)
    [ -n "$PK" ] && [ "$PK" -gt 0 ] || { cat "$OUT_DIR/pktgen.log" >&2; die "pktgen printed no summary with packets sent"; }
    if [ "$ANNOTATE" = 1 ]; then
        callgrind_annotate --inclusive=yes "$out" 2>/dev/null | sed -n '/file:function/,/^$/p' | head -n 25
    fi
    PER=$(awk -v a="$IR" -v b="$PK" 'BEGIN { printf "%.1f", a / b }')
    echo "pktgen send loop (build_burst, TX-only, 60-byte frames, burst 32): $IR Ir / $PK packets"
    echo "pktgen send loop instructions/packet: $PER (target <= $TARGET: $(verdict "$PER" "$TARGET"))"
    printf '{"bench":"callgrind-pktgen","path":"build_burst","frame":60,"batch":32,"packets":%s,"ir":%s,"instr_per_pkt":%s,"target":%s}\n' \
        "$PK" "$IR" "$PER" "$TARGET"
    exit 0
fi

echo "== building the dv_burst bench (bench profile)" >&2
build_log=$(cargo bench -p rawpkt --features internals --bench dv_burst --no-run 2>&1) || { echo "$build_log" >&2; die "build failed"; }
# cargo prints "Executable benches/dv_burst.rs (target/release/deps/dv_burst-<hash>)".
BIN=$(printf '%s\n' "$build_log" | sed -n 's/.*Executable .*(\(.*dv_burst-[0-9a-f]*\))$/\1/p' | tail -n 1)
if [ -z "$BIN" ] || [ ! -x "$BIN" ]; then
    BIN=$(find "${CARGO_TARGET_DIR:-target}/release/deps" -maxdepth 1 -type f -name 'dv_burst-*' -perm -u+x \
        ! -name '*.d' -printf '%T@ %p\n' 2>/dev/null | sort -rn | head -n 1 | cut -d' ' -f2-)
fi
[ -n "$BIN" ] && [ -x "$BIN" ] || die "cannot find the dv_burst bench binary under target/release/deps"
echo "== binary: $BIN" >&2

# Check the symbols exist (they are #[inline(never)] trait impls) and take valgrind's demangled
# form, e.g. "<rawpkt::tx::dv::DvTxQueue as rawpkt::TxQueue>::tx_burst". The globs below match it
# whatever the crate path or a future `v0` mangling prints around the type and method names.
TX_GLOB='*DvTxQueue*TxQueue*tx_burst*'
[ -z "${RAWPKT_BENCH_RX:-}" ] ||
    { echo "callgrind.sh: RAWPKT_BENCH_RX is gone: use --rx-mode striding (or cyclic, compressed, striding+compressed)" >&2; exit 2; }
case "$RX_MODE" in
    cyclic|compressed|striding|striding+compressed) ;;
    *) echo "callgrind.sh: --rx-mode must be cyclic, compressed, striding or striding+compressed" >&2; exit 2 ;;
esac
# rx_queue <mode>: the receive queue type the mode runs on, whose rx_burst is counted.
rx_queue() { case "$1" in striding*) echo DvStridingRxQueue ;; *) echo DvRxQueue ;; esac; }
rx_glob() { echo "*$(rx_queue "$1")*RxQueue*rx_burst*"; }
if command -v nm >/dev/null 2>&1; then
    syms=$(nm -C "$BIN" 2>/dev/null || true)
    grep -q 'DvTxQueue.*TxQueue.*tx_burst' <<<"$syms" ||
        die "no DvTxQueue tx_burst symbol in $BIN (inlined? it must stay #[inline(never)])"
    for q in DvRxQueue DvStridingRxQueue; do
        grep -q "[^a-zA-Z]$q.*RxQueue.*rx_burst" <<<"$syms" ||
            die "no $q rx_burst symbol in $BIN (inlined? it must stay #[inline(never)])"
    done
    grep -E 'Dv([TR]x|StridingRx)Queue.*[tr]x_burst|xconnect_burst' <<<"$syms" | sed 's/^[0-9a-f]* [A-Za-z] /== symbol: /' >&2
fi

# device_modes <device>: the receive modes the device has (the bench says on stderr why it
# leaves one out).
device_modes() { RAWPKT_BENCH_DEVICE=$1 "$BIN" rx-modes || die "the bench binary lists no receive modes (dv_burst rx-modes)"; }
# refused <device>: true, after one line on stderr saying why, if the device lacks $RX_MODE.
refused() {
    local why
    why=$(RAWPKT_BENCH_DEVICE=$1 "$BIN" rx-modes 2>&1 >/dev/null | grep -F "dv_burst: $RX_MODE: ") || return 1
    echo "callgrind.sh: $1 skipped: ${why#dv_burst: }" >&2
}

# run <name> <glob> [mode]: prints "<Ir> <tx packets> <rx packets> <rx mode that ran>" (receive
# queues of $RX_MODE); a run that gives no figure prints its one line on stderr and returns 3.
run() {
    local name=$1 glob=$2 mode=${3:-stepped} out="$OUT_DIR/callgrind.$1.out" log="$OUT_DIR/bench.$1.log"
    local vlog="$OUT_DIR/valgrind.$name.log"
    echo "== callgrind: $mode $ITERS --rx-mode $RX_MODE, collecting inside $glob" >&2
    if ! valgrind --tool=callgrind --dump-instr=no --collect-atstart=no \
        --toggle-collect="$glob" --callgrind-out-file="$out" \
        "$BIN" "$mode" "$ITERS" --rx-mode "$RX_MODE" >"$log" 2>"$vlog"; then
        # The bench's own verdict (one "dv_burst: ..." line), else valgrind's whole log.
        if grep -q '^dv_burst: ' "$vlog"; then
            echo "callgrind.sh: $RAWPKT_BENCH_DEVICE $name: $(grep -m1 '^dv_burst: ' "$vlog" | sed 's/^dv_burst: //')" >&2
            return 3
        fi
        cat "$vlog" >&2; die "valgrind run ($name) failed"
    fi
    local ir pk ran
    # "totals:" (or "summary:" in older formats) is the total of the one event, Ir.
    ir=$(sed -n 's/^totals: *\([0-9][0-9]*\).*/\1/p' "$out" | tail -n 1)
    [ -n "$ir" ] || ir=$(sed -n 's/^summary: *\([0-9][0-9]*\).*/\1/p' "$out" | tail -n 1)
    [ -n "$ir" ] || die "no totals/summary line in $out"
    [ "$ir" -gt 0 ] || die "callgrind collected 0 instructions for $glob: the toggle matched no function" \
        "(check: callgrind_annotate $out; nm -C $BIN | grep burst)"
    pk=$(sed -n 's/^packets tx=\([0-9][0-9]*\) rx=\([0-9][0-9]*\)$/\1 \2/p' "$log" | tail -n 1)
    [ -n "$pk" ] || { cat "$log" >&2; die "the bench printed no 'packets tx=... rx=...' line"; }
    ran=$(sed -n 's/^rx_mode=//p' "$log" | tail -n 1)
    echo "$ir $pk ${ran:-none}"
}


if [ "$JSON" = 1 ]; then
    # json_line <path> <device> <rx_mode that ran> <rx_mode asked> <ir> <packets> <target>
    json_line() {
        local per
        per=$(awk -v a="$5" -v b="$6" 'BEGIN { printf "%.1f", a / b }')
        printf '{"path":"%s","device":"%s","rx_mode":"%s","rx_mode_asked":"%s","instr_per_pkt":%s,"ir":%s,"packets":%s,"iterations":%s,"batch":32,"frame":60,"target":%s,"cpu":"%s"}\n' \
            "$1" "$2" "$3" "$4" "$per" "$5" "$6" "$ITERS" "$7" "$CPU"
    }
    for DEV in $DEVICES; do
        case "$DEV" in cx4|cx5) ;; *) die "--device must be cx4 or cx5" ;; esac
        export RAWPKT_BENCH_DEVICE=$DEV
        # TX does not depend on the receive mode: measured once, next to cyclic receive queues.
        RX_MODE=cyclic
        res=$(run "tx.$DEV" "$TX_GLOB")
        read -r IR PK _ <<<"$res"
        [ "$PK" -gt 0 ] || die "the bench transmitted no packets"
        json_line tx "$DEV" cyclic cyclic "$IR" "$PK" "$(target tx "$DEV" cyclic)"
        for RX_MODE in $(device_modes "$DEV"); do
            if res=$(run "rx.$DEV.$RX_MODE" "$(rx_glob "$RX_MODE")"); then
                read -r IR _ PK RAN <<<"$res"
                [ "$PK" -gt 0 ] || die "the bench received no packets ($RX_MODE)"
                json_line rx "$DEV" "$RAN" "$RX_MODE" "$IR" "$PK" "$(target rx "$DEV" "$RAN")"
            else
                [ $? = 3 ] || exit 1
            fi
            if res=$(run "xc.$DEV.$RX_MODE" '*xconnect_burst*' stepped-xc); then
                read -r IR PK _ RAN <<<"$res"
                [ "$PK" -gt 0 ] || die "the cross-connect forwarded no packets ($RX_MODE)"
                json_line xconnect "$DEV" "$RAN" "$RX_MODE" "$IR" "$PK" "$(target xconnect "$DEV" "$RAN")"
            else
                [ $? = 3 ] || exit 1
            fi
        done
    done
    exit 0
fi

if [ "$XCONNECT" = 1 ]; then
    for DEV in $DEVICES; do
        case "$DEV" in cx4|cx5) ;; *) die "--device must be cx4 or cx5" ;; esac
        export RAWPKT_BENCH_DEVICE=$DEV
        ! refused "$DEV" || continue
        xc_res=$(run "xc.$DEV" '*xconnect_burst*' stepped-xc) || exit 1
        read -r XC_IR XC_PKTS _ XC_RAN <<<"$xc_res"
        [ "$XC_PKTS" -gt 0 ] || die "the cross-connect forwarded no packets"
        if [ "$ANNOTATE" = 1 ]; then
            callgrind_annotate --inclusive=yes "$OUT_DIR/callgrind.xc.$DEV.out" 2>/dev/null | sed -n '/file:function/,/^$/p' | head -n 20
        fi
        XC_PER=$(awk -v a="$XC_IR" -v b="$XC_PKTS" 'BEGIN { printf "%.1f", a / b }')
        XC_TARGET=$(target xconnect "$DEV" "$XC_RAN")
        echo "device: $DEV; builds: $CPU; iterations: $ITERS bursts of 32 (stepped-xc), binary: $BIN"
        echo "xconnect: $XC_IR Ir / $XC_PKTS packets forwarded"
        echo "$DEV xconnect ($XC_RAN) instructions/packet (rx_burst + tx_burst): $XC_PER (target <= $XC_TARGET: $(verdict "$XC_PER" "$XC_TARGET"))"
        printf '{"bench":"callgrind-xconnect","device":"%s","rx_mode":"%s","batch":32,"frame":60,"iterations":%s,"xc_ir":%s,"xc_packets":%s,"xc_ir_per_pkt":%s,"xc_target":%s}\n' \
            "$DEV" "$XC_RAN" "$ITERS" "$XC_IR" "$XC_PKTS" "$XC_PER" "$XC_TARGET"
    done
    exit 0
fi

for DEV in $DEVICES; do
case "$DEV" in cx4|cx5) ;; *) die "--device must be cx4 or cx5" ;; esac
export RAWPKT_BENCH_DEVICE=$DEV
! refused "$DEV" || continue
tx_res=$(run "tx.$DEV" "$TX_GLOB") || exit 1
rx_res=$(run "rx.$DEV" "$(rx_glob "$RX_MODE")") || exit 1
read -r TX_IR TX_PKTS _ <<<"$tx_res"
read -r RX_IR _ RX_PKTS RX_RAN <<<"$rx_res"
[ "$TX_PKTS" -gt 0 ] || die "the bench transmitted no packets"
[ "$RX_PKTS" -gt 0 ] || die "the bench received no packets"

TX_PER=$(awk -v a="$TX_IR" -v b="$TX_PKTS" 'BEGIN { printf "%.1f", a / b }')
RX_PER=$(awk -v a="$RX_IR" -v b="$RX_PKTS" 'BEGIN { printf "%.1f", a / b }')


if [ "$ANNOTATE" = 1 ]; then
    command -v callgrind_annotate >/dev/null 2>&1 || die "--annotate needs callgrind_annotate (part of valgrind)"
    for q in tx rx; do
        f="$OUT_DIR/callgrind.$q.$DEV.out"
        if [ "$q" = tx ]; then pk=$TX_PKTS; else pk=$RX_PKTS; fi
        echo "== $q: inclusive Ir per packet by function ($f)"
        { callgrind_annotate --inclusive=yes "$f" 2>/dev/null |
            awk '/file:function/ { on = 1; next } on && /^$/ { exit } on && /^ *[0-9]/' |
            grep -Ev '::main( |$)|\(below main\)|[?]{3}:main |lang_start|backtrace|libc-start|ld-linux|[?]{3}:0x' |
            awk -v pk="$pk" -v root="$PWD/" '{ n = $1; gsub(",", "", n); fn = $0
                               sub(/^ *[0-9,]+ \([ 0-9.]*%\) +/, "", fn); sub(/ \[[^]]*\]$/, "", fn)
                               if (index(fn, root) == 1) fn = substr(fn, length(root) + 1)
                               sub(/^\/rustc\/[0-9a-f]+\//, "", fn)
                               printf "%8.2f  %s\n", n / pk, fn }' | head -n 15; } || true
        echo "== $q: hottest source lines, self Ir per packet (file:line, inlined code counted where it is written)"
        { callgrind_annotate --auto=yes --context=0 "$f" 2>/dev/null |
            awk -v pk="$pk" -v root="$PWD/" '
                /Auto-annotated source:/ { f = $NF; if (index(f, root) == 1) f = substr(f, length(root) + 1)
                                           sub(/^\/rustc\/[0-9a-f]+\//, "", f); next }
                /^-- line [0-9]+ / { ln = $3; next }
                /^ *[0-9][0-9,]* \([ 0-9.]*%\) / && f != "" && !/events annotated/ {
                    n = $1; gsub(",", "", n); src = $0; sub(/^ *[0-9,]+ \([ 0-9.]*%\) */, "", src)
                    printf "%8.2f  %s:%s  %s\n", n / pk, f, (src ~ /^<counts for unidentified/) ? "?" : ln, src }' |
            sort -rn | head -n 25; } || true
        echo
    done
fi

TX_TARGET=$(target tx "$DEV" cyclic)
RX_TARGET=$(target rx "$DEV" "$RX_RAN")
echo "device: $DEV; builds: $CPU; iterations: $ITERS bursts of 32 (stepped mode), binary: $BIN"
echo "tx: $TX_IR Ir / $TX_PKTS packets"
echo "rx: $RX_IR Ir / $RX_PKTS packets"
echo "$DEV tx instructions/packet: $TX_PER (target <= $TX_TARGET: $(verdict "$TX_PER" "$TX_TARGET"))"
echo "$DEV rx ($RX_RAN) instructions/packet (incl. refill): $RX_PER (target <= $RX_TARGET: $(verdict "$RX_PER" "$RX_TARGET"))"
printf '{"bench":"callgrind","device":"%s","rx_mode":"%s","batch":32,"frame":60,"iterations":%s,"tx_ir":%s,"tx_packets":%s,"tx_ir_per_pkt":%s,"tx_target":%s,"rx_ir":%s,"rx_packets":%s,"rx_ir_per_pkt":%s,"rx_target":%s}\n' \
    "$DEV" "$RX_RAN" "$ITERS" "$TX_IR" "$TX_PKTS" "$TX_PER" "$TX_TARGET" "$RX_IR" "$RX_PKTS" "$RX_PER" "$RX_TARGET"
done
