#!/usr/bin/env bash
# Instructions per packet in DPDK's mlx5 RX and TX burst functions and in rawpkt's, side by
# side, on the same device: the model library's mlx5_0 and mlx5_1 (cabled back to back), `io`
# forwarding on one core, bursts of 32, 60-byte frames (64 on the wire), 1024-entry rings,
# 32 frames per direction put in flight at the start (testpmd's `--tx-first`, l2-xconnect's
# `--tx-first`), counted by callgrind the same way for both, per receive mode both have.
#
#   dpdk-testpmd (DPDK 22.11 built here from Debian's source package, with Debian's compiler
#     flags and -Dplatform=generic, symbols kept) -> the mlx5 PMD on the model library, through
#     scripts/model-host.sh;
#   l2-xconnect --port-a mlx5:mlx5_0/1 --port-b mlx5:mlx5_1/1 on the same library.
#
# How it counts (docs/benchmarks.md, "DPDK's mlx5 PMD and rawpkt side by side"): collection
# only inside the burst functions (--toggle-collect), costs zeroed when an RX burst function is
# entered (--zero-before) and dumped when a TX burst function is entered and left
# (--dump-before, --dump-after). A forwarder calls TX only after an RX burst that returned
# packets, so each dump taken on entering TX holds exactly that RX call, and each taken on
# leaving TX holds that TX call; the RX calls that found nothing (most of them: valgrind runs
# one thread at a time, and the forwarder polls while the model's thread waits its turn) are
# zeroed away. RX per packet = the RX dumps / the packets received; TX per packet = the TX
# dumps / the packets sent (the tx-first bursts included, their RX dumps left out).
#
# Usage: scripts/dpdk-callgrind.sh [--frames N] [--modes LIST] [--side both|dpdk|rawpkt]
#                                  [--build-only] [--keep]
#   --frames N     frames forwarded per run, both ports together (default 20000): the run stops
#                  once the model's rx_frames of mlx5_0 and mlx5_1 add up to N
#   --modes LIST   comma-separated, of cyclic, compressed, striding, striding+compressed
#                  (default: all four). DPDK devargs: cyclic rxq_cqe_comp_en=0; compressed
#                  (the PMD's default); striding mprq_en=1,rxqs_min_mprq=1,rxq_cqe_comp_en=0;
#                  striding+compressed mprq_en=1,rxqs_min_mprq=1. rawpkt: --rx-mode MODE.
#   --side S       run only DPDK's or only rawpkt's side
#   --build-only   build DPDK (and the rawpkt side) and stop
#   --keep         keep the callgrind dumps (target/dpdk-callgrind/<side>.<mode>/)
# Environment: DPDK_DIR (default target/dpdk): where Debian's source package is unpacked
# (DPDK_DIR/src) and built (DPDK_DIR/build); nothing of it is part of the repository.
# Needs root (model-host.sh's namespace; RAW_PACKET QPs), valgrind, python3, and for the
# build meson, ninja-build, python3-pyelftools, dpkg-dev (apt-get install them); the source
# comes with `apt-get source dpdk=<the installed dpdk-dev's version>`, from a deb-src list
# made for the purpose when the machine's apt has none.
# Output: one line per side and mode, then the table (markdown) on stdout.
set -uo pipefail

FRAMES=20000
MODES="cyclic,compressed,striding,striding+compressed"
SIDE=both
BUILD_ONLY=0
KEEP=0
usage() { echo "dpdk-callgrind.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --frames) FRAMES=${2:-}; shift 2 || usage "--frames needs a number" ;;
        --modes) MODES=${2:-}; shift 2 || usage "--modes needs a list" ;;
        --side) SIDE=${2:-}; shift 2 || usage "--side needs both, dpdk or rawpkt" ;;
        --build-only) BUILD_ONLY=1; shift ;;
        --keep) KEEP=1; shift ;;
        -h | --help) sed -n '2,44p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) usage "unknown argument $1 (see --help)" ;;
    esac
done
case "$FRAMES" in '' | *[!0-9]* | 0) usage "--frames must be a positive integer" ;; esac
case "$SIDE" in both | dpdk | rawpkt) ;; *) usage "--side must be both, dpdk or rawpkt" ;; esac
for m in ${MODES//,/ }; do
    case "$m" in cyclic | compressed | striding | striding+compressed) ;; *) usage "unknown mode $m" ;; esac
done

die() { echo "dpdk-callgrind.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "needs root (a network namespace for the PMD's netdevs, RAW_PACKET queues)"
for t in valgrind python3 cargo; do command -v $t >/dev/null || die "$t is missing"; done

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root" || exit 1
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
DPDK_DIR=${DPDK_DIR:-$target/dpdk}
OUT=$target/dpdk-callgrind
mkdir -p "$DPDK_DIR" "$OUT" || exit 1

# ---- DPDK from Debian's source package, the version of the installed dpdk-dev ----------------
build_dpdk() {
    local B=$DPDK_DIR/build
    [ -x "$B/app/dpdk-testpmd" ] && [ -f "$B/drivers/librte_net_mlx5.so" ] && return 0
    for t in meson ninja dpkg-source dpkg-buildflags; do
        command -v $t >/dev/null || die "$t is missing (apt-get install meson ninja-build dpkg-dev python3-pyelftools)"
    done
    python3 -c 'import elftools' 2>/dev/null || die "python3-pyelftools is missing (DPDK's build needs it)"
    if [ ! -d "$DPDK_DIR/src" ]; then
        local ver
        ver=$(dpkg-query -W -f='${Version}' dpdk-dev 2>/dev/null) || die "dpdk-dev is not installed (apt-get install dpdk-dev): its version names the source"
        echo "== apt-get source dpdk=$ver" >&2
        (
            cd "$DPDK_DIR" || exit 1
            apt-get source --download-only "dpdk=$ver" >/dev/null 2>&1 && exit 0
            # No deb-src in the machine's apt: a list of the same mirrors' sources, in a
            # directory of its own (the machine's apt configuration is left alone).
            local lists=$DPDK_DIR/apt-lists list=$DPDK_DIR/deb-src.sources
            mkdir -p "$lists/partial"
            grep -h -v '^#' /etc/apt/sources.list.d/*.sources 2>/dev/null | sed 's/^Types: deb$/Types: deb-src/' >"$list"
            [ -s "$list" ] || sed -n 's/^deb \(.*\)/deb-src \1/p' /etc/apt/sources.list >"$list.list"
            local opts=(-o "Dir::State::Lists=$lists" -o Dir::Etc::SourceParts=/dev/null)
            if [ -s "$list" ]; then opts+=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$DPDK_DIR/srcparts"); mkdir -p "$DPDK_DIR/srcparts"; cp "$list" "$DPDK_DIR/srcparts/"; else opts+=(-o "Dir::Etc::SourceList=$list.list"); fi
            apt-get "${opts[@]}" update >/dev/null 2>&1 || exit 1
            apt-get "${opts[@]}" source --download-only "dpdk=$ver" >/dev/null 2>&1
        ) || die "apt-get source dpdk=$ver failed (no deb-src reachable?)"
        (cd "$DPDK_DIR" && dpkg-source -x dpdk_*.dsc src >/dev/null) || die "dpkg-source -x failed"
    fi
    echo "== building DPDK in $B (testpmd, the mlx5 PMD and what they need; ninja, some minutes)" >&2
    # Debian's flags (debian/rules: meson with dpkg-buildflags and -Dplatform=generic, which
    # is -march=corei7), so that the code counted is the code Debian ships; -g from them too.
    local cflags ldflags
    cflags="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)"
    ldflags=$(dpkg-buildflags --get LDFLAGS)
    if [ ! -f "$B/build.ninja" ]; then
        CFLAGS=$cflags LDFLAGS=$ldflags meson setup "$B" "$DPDK_DIR/src" --buildtype=plain \
            --default-library=shared -Dplatform=generic -Dtests=false -Denable_apps=test-pmd \
            -Denable_drivers=bus/pci,bus/vdev,bus/auxiliary,common/mlx5,net/mlx5,mempool/ring \
            -Ddisable_libs=bitratestats,cfgfile,flow_classify,gpudev,gro,gso,kni,jobstats,latencystats,metrics,node,pdump,pipeline,port,power,table,vhost \
            >"$OUT/meson.log" 2>&1 || die "meson setup failed: $OUT/meson.log"
    fi
    ninja -C "$B" >"$OUT/ninja.log" 2>&1 || die "ninja failed: $OUT/ninja.log"
}

# ---- rawpkt's side: l2-xconnect and the model library ------------------------------------------
build_rawpkt() {
    echo "== building l2-xconnect and the model library (release)" >&2
    cargo build -q --release -p rawpkt-tools --bin l2-xconnect >"$OUT/cargo.log" 2>&1 || die "cargo build failed: $OUT/cargo.log"
    "$root/scripts/model-env.sh" >/dev/null || die "building the model library failed"
}

[ "$SIDE" = rawpkt ] || build_dpdk
[ "$SIDE" = dpdk ] || build_rawpkt
[ $BUILD_ONLY = 1 ] && exit 0
B=$DPDK_DIR/build
LIB=$target/release/librawpkt_model_verbs.so
[ "$SIDE" = dpdk ] || [ -f "$LIB" ] || die "no model library at $LIB"

# The burst functions, by their exact names. DPDK: the vectorized RX entry points the PMD picks
# for one queue (mlx5_rx_burst_vec; with MPRQ mlx5_rx_burst_mprq_vec, or the scalar
# mlx5_rx_burst_mprq where the vectorized one does not apply) and the TX template instance it
# picks for a ConnectX-5 with no offloads asked (DPDK_TX_BURST, default mlx5_tx_burst_none_empw:
# enhanced MPW, no inlining; a run whose TX dumps stay empty says the PMD took another).
# rawpkt: the DV queues' trait methods.
DPDK_TX_BURST=${DPDK_TX_BURST:-mlx5_tx_burst_none_empw}
dpdk_rx() { case "$1" in striding*) echo mlx5_rx_burst_mprq_vec mlx5_rx_burst_mprq ;; *) echo mlx5_rx_burst_vec ;; esac; }
rawpkt_rx() {
    case "$1" in
        striding*) echo '<rawpkt::rx::dv_striding::DvStridingRxQueue as rawpkt::RxQueue>::rx_burst' ;;
        *) echo '<rawpkt::rx::dv::DvRxQueue as rawpkt::RxQueue>::rx_burst' ;;
    esac
}
RAWPKT_TX='<rawpkt::tx::dv::DvTxQueue as rawpkt::TxQueue>::tx_burst'

# cg_args RX... -- TX...: the callgrind options for those functions. callgrind keeps one setting
# per function pattern, and a pattern that is a prefix of another's function takes it over: so
# each setting of a function gets a pattern of its own, the exact name for --toggle-collect and
# suffixes after a leading * for the rest ("*lx5_rx_burst_vec", "*x5_tx_...").
cg_args() {
    local f rx=1
    CG=(--tool=callgrind --fair-sched=yes --dump-instr=no --collect-atstart=no)
    for f in "$@"; do
        [ "$f" = -- ] && { rx=0; continue; }
        CG+=("--toggle-collect=$f")
        if [ $rx = 1 ]; then
            CG+=("--zero-before=*${f:1}")
        else
            CG+=("--dump-before=*${f:1}" "--dump-after=*${f:2}")
        fi
    done
}

# frames_seen FILE: rx_frames of mlx5_0 + mlx5_1 in the model's counters file.
frames_seen() {
    awk '$1 == "mlx5_0" || $1 == "mlx5_1" { for (i = 2; i <= NF; i++) if ($i ~ /^rx_frames=/) { sub(/.*=/, "", $i); s += $i } } END { print s + 0 }' "$1" 2>/dev/null || echo 0
}

# wait_frames FILE PID: until FRAMES were forwarded (0), PID ended (1) or nothing moved for 10 min (2).
wait_frames() {
    local last=-1 still=0 n
    while kill -0 "$2" 2>/dev/null; do
        n=$(frames_seen "$1")
        [ "$n" -ge "$FRAMES" ] && return 0
        if [ "$n" = "$last" ]; then still=$((still + 1)); else still=0; last=$n; fi
        [ $still -ge 600 ] && return 2
        sleep 1
    done
    return 1
}

# sums DIR SKIP: "<rx Ir> <tx Ir> <rx dumps> <tx dumps> <rx fn> <tx fn>" from the dumps in DIR
# (leaving out the RX dumps of the first SKIP TX calls, the tx-first bursts).
sums() {
    python3 - "$1" "$2" <<'EOF'
import glob, re, sys
d, skip = sys.argv[1], int(sys.argv[2])
dumps = []
for p in glob.glob(d + "/cg.out.*"):
    m = re.search(r"\.(\d+)$", p)
    if not m:
        continue
    trig, tot, fns = "", 0, {}
    names, fn = {}, None
    for line in open(p, errors="replace"):
        if line.startswith("desc: Trigger:"):
            trig = line
        elif line.startswith(("totals:", "summary:")):
            tot = int(line.split()[1])
        elif line.startswith("fn="):
            g = re.match(r"fn=\((\d+)\)(?: (.*))?", line.strip())
            if g.group(2):
                names[g.group(1)] = g.group(2)
            fn = names.get(g.group(1))
        elif line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if len(parts) > 1 and fn:
                fns[fn] = fns.get(fn, 0) + int(parts[1])
    dumps.append((int(m.group(1)), trig, tot, fns))
dumps.sort()
rx = tx = nrx = ntx = 0
rxfn, txfn = set(), set()
before = 0
for _, trig, tot, fns in dumps:
    if "entered" in trig or "before" in trig.lower():
        before += 1
        if before > skip:
            rx += tot
            nrx += 1
            rxfn.update(f for f, c in fns.items() if c and re.search(r"rx_burst", f))
    elif "left" in trig or "after" in trig.lower():
        tx += tot
        ntx += 1
        txfn.update(f for f, c in fns.items() if c and re.search(r"tx_burst", f))
short = lambda s: ",".join(sorted(x.split(" as ")[0].lstrip("<").split("::")[-1] if " as " in x else x for x in s)) or "-"
print(rx, tx, nrx, ntx, short(rxfn), short(txfn))
EOF
}

declare -A RES
row() { # side mode rx_ir tx_ir rx_pkts tx_pkts bursts rxfn txfn
    local rxp txp
    rxp=$(awk -v a="$3" -v b="$5" 'BEGIN { printf "%.1f", a / b }')
    txp=$(awk -v a="$4" -v b="$6" 'BEGIN { printf "%.1f", a / b }')
    RES[$1.$2]="$rxp $txp"
    echo "$1 $2: RX $rxp instructions/packet ($3 / $5 packets in $7 bursts that returned packets, $8), TX $txp ($4 / $6 packets, $9)"
}

run_dpdk() {
    local mode=$1 dev d fifo ctr pid rc
    case "$mode" in
        cyclic) dev=",rxq_cqe_comp_en=0" ;;
        compressed) dev="" ;;
        striding) dev=",mprq_en=1,rxqs_min_mprq=1,rxq_cqe_comp_en=0" ;;
        striding+compressed) dev=",mprq_en=1,rxqs_min_mprq=1" ;;
    esac
    d=$OUT/dpdk.$mode
    rm -rf "$d" && mkdir -p "$d"
    ctr=$d/counters fifo=$d/stdin
    mkfifo "$fifo"
    # shellcheck disable=SC2046
    cg_args $(dpdk_rx "$mode") -- "$DPDK_TX_BURST"
    echo "== dpdk $mode: testpmd io under callgrind (start-up under valgrind takes minutes)" >&2
    exec 3<>"$fifo"
    RAWPKT_MODEL_DEVX=0 RAWPKT_MODEL_COUNTERS=$ctr "$root/scripts/model-host.sh" \
        valgrind "${CG[@]}" --callgrind-out-file="$d/cg.out" "$B/app/dpdk-testpmd" \
        -l 0-1 --no-huge -m 512 --no-shconf --iova-mode=va -d "$B/drivers/librte_mempool_ring.so" \
        -a "0000:3b:00.0,dv_flow_en=0$dev" -a "0000:3b:00.1,dv_flow_en=0$dev" \
        --log-level=pmd.net.mlx5:debug -- \
        --nb-cores=1 --forward-mode=io --auto-start --tx-first --txpkts=60 --burst=32 \
        --rxd=1024 --txd=1024 --total-num-mbufs=16384 <"$fifo" >"$d/log" 2>&1 &
    pid=$!
    wait_frames "$ctr" $pid
    rc=$?
    echo >&3 # testpmd's "Press enter to exit"
    exec 3>&-
    wait $pid || { echo "dpdk $mode: testpmd failed (exit $?, wait $rc): $d/log" >&2; return 1; }
    [ $rc = 0 ] || { echo "dpdk $mode: no $FRAMES frames (wait $rc): $d/log" >&2; return 1; }
    # testpmd's forward statistics: the accumulated RX-packets and TX-packets of both ports.
    local rxp txp
    rxp=$(sed -n '/Accumulated forward statistics/,/^ *+*$/s/.*RX-packets: *\([0-9]*\).*/\1/p' "$d/log" | head -1)
    txp=$(sed -n '/Accumulated forward statistics/,/^ *+*$/s/.*TX-packets: *\([0-9]*\).*/\1/p' "$d/log" | head -1)
    [ -n "$rxp" ] && [ -n "$txp" ] || { echo "dpdk $mode: no forward statistics in $d/log" >&2; return 1; }
    set -- $(sums "$d" 2)
    row dpdk "$mode" "$1" "$2" "$rxp" "$txp" "$3" "$5" "$6"
    [ $KEEP = 1 ] || rm -f "$d"/cg.out*
}

run_rawpkt() {
    local mode=$1 d ctr pid rc
    d=$OUT/rawpkt.$mode
    rm -rf "$d" && mkdir -p "$d"
    ctr=$d/counters
    cg_args "$(rawpkt_rx "$mode")" -- "$RAWPKT_TX"
    echo "== rawpkt $mode: l2-xconnect under callgrind" >&2
    RAWPKT_LIBIBVERBS=$LIB RAWPKT_LIBMLX5=$LIB RAWPKT_MODEL_COUNTERS=$ctr \
        valgrind "${CG[@]}" --callgrind-out-file="$d/cg.out" "$target/release/l2-xconnect" \
        --port-a mlx5:mlx5_0/1 --port-b mlx5:mlx5_1/1 --rx-mode "$mode" --tx-first \
        --burst 32 --stats-interval 0 </dev/null >"$d/log" 2>&1 &
    pid=$!
    wait_frames "$ctr" $pid
    rc=$?
    kill -INT $pid 2>/dev/null
    wait $pid || { echo "rawpkt $mode: l2-xconnect failed (exit $?, wait $rc): $d/log" >&2; return 1; }
    [ $rc = 0 ] || { echo "rawpkt $mode: no $FRAMES frames (wait $rc): $d/log" >&2; return 1; }
    # The summary's rx and tx of both directions; the tx-first frames are sent outside them.
    local rxp txp first
    rxp=$(sed -n 's/^ *A->B:.*(rx \([0-9]*\),.*/\1/p; s/^ *B->A:.*(rx \([0-9]*\),.*/\1/p' "$d/log" | awk '{s += $1} END {print s}')
    txp=$(sed -n 's/^ *A->B:.*, tx \([0-9]*\),.*/\1/p; s/^ *B->A:.*, tx \([0-9]*\),.*/\1/p' "$d/log" | awk '{s += $1} END {print s}')
    first=$(sed -n 's/.*--tx-first sent \([0-9]*\) frames out of A and \([0-9]*\) out of B.*/\1 \2/p' "$d/log" | awk '{s += $1 + $2} END {print s}')
    [ -n "$rxp" ] && [ "$rxp" -gt 0 ] || { echo "rawpkt $mode: no summary in $d/log" >&2; return 1; }
    set -- $(sums "$d" 2)
    row rawpkt "$mode" "$1" "$2" "$rxp" "$((txp + first))" "$3" "$5" "$6"
    [ $KEEP = 1 ] || rm -f "$d"/cg.out*
}

failed=0
for mode in ${MODES//,/ }; do
    [ "$SIDE" = rawpkt ] || run_dpdk "$mode" || failed=1
    [ "$SIDE" = dpdk ] || run_rawpkt "$mode" || failed=1
done

echo
echo "| receive mode | DPDK RX | DPDK TX | rawpkt RX | rawpkt TX |"
echo "|---|---:|---:|---:|---:|"
for mode in ${MODES//,/ }; do
    read -r drx dtx <<<"${RES[dpdk.$mode]:-- -}"
    read -r rrx rtx <<<"${RES[rawpkt.$mode]:-- -}"
    echo "| $mode | $drx | $dtx | $rrx | $rtx |"
done
exit $failed
