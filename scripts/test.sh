#!/usr/bin/env bash
# The project's test command (README "Set-up on a fresh machine"; .ci/run calls it).
#
#   bash scripts/test.sh [--all] [--dry-run] [extra cargo test arguments, e.g. -p rawpkt]
#   bash scripts/test.sh --profiles [PROFILE...]
#
# --profiles runs the DV test set (tests/dv_datapath.rs, dv_faults.rs, rx_modes.rs,
# cqe_compression.rs, dv_striding.rs, scatter_gather.rs, profiles.rs) once per model profile
# (default: default cx5 cx6dx cx7 strict; `mlx5_model::profile`), with RAWPKT_MODEL_PROFILE set,
# and prints one line per profile: tests passed, failed, and skipped by the profile (a test's
# `common::requires` said `PROFILE-SKIP`: an assertion only one knob value makes true). Exit 1
# if any test failed on any profile. CI runs it after the whole suite (.ci/run).
#
# As root with apt-get, it installs what the tests need (iproute2, python3, iputils-ping,
# util-linux, procps, tshark, gcc, libibverbs-dev, and Debian's ibverbs-utils, perftest and DPDK
# (dpdk-dev's dpdk-testpmd with librte-net-mlx5-23, DPDK's mlx5 PMD), whose unmodified programs
# run on the model library; curl, and Python's prometheus_client from PyPI, which check pktgen's
# metrics endpoint) and runs every test, the #[ignore]d ones too.
# Where it cannot install (a normal user, no apt), it runs every test whose needs are met and
# leaves out, with cargo test's --skip, those whose needs are not, listing them under "NOT RUN"
# with what each needs: they are not counted as passed, and the last line says the run was
# partial. A test's needs are read from its `#[ignore = "needs …"]` reason (one source of truth).
#
# Exit status: 0 when every test that ran passed, 1 otherwise; with --all, or under CI (CI=true),
# a test left out is a failure too.
set -uo pipefail
cd "$(dirname "$0")/.."

all=0 dry=0
[ "${CI:-}" = true ] && all=1

if [ "${1:-}" = --profiles ]; then
    shift
    profiles=("$@")
    [ ${#profiles[@]} -gt 0 ] || profiles=(default cx5 cx6dx cx7 strict)
    dv=(--test dv_datapath --test dv_faults --test rx_modes --test cqe_compression --test dv_striding
        --test scatter_gather --test profiles)
    # Built once: the profile is read when each test runs, not when it is compiled.
    cargo test -p rawpkt --features internals --no-run "${dv[@]}" >/dev/null 2>&1 ||
        cargo test -p rawpkt --features internals --no-run "${dv[@]}" || exit 1
    log=$(mktemp)
    trap 'rm -f "$log"' EXIT
    bad=0
    summary=()
    for p in "${profiles[@]}"; do
        start=$SECONDS
        RAWPKT_MODEL_PROFILE=$p cargo test -p rawpkt --features internals --no-fail-fast "${dv[@]}" \
            -- --nocapture >"$log" 2>&1
        status=$?
        read -r passed failed < <(awk '/^test result:/ { p += $4; f += $6 } END { print p + 0, f + 0 }' "$log")
        skipped=$(grep -c '^PROFILE-SKIP ' "$log")
        line="profile $p: $passed passed, $failed failed, $skipped skipped (requires); $((SECONDS - start)) s"
        echo "$line"
        summary+=("$line")
        if [ "$status" != 0 ] || [ "$failed" != 0 ]; then
            bad=1
            sed -n 's/^test \(.*\) \.\.\. FAILED$/  FAILED \1/p' "$log"
            grep -E "^error(\[|:)" "$log" | head -5
        fi
        grep '^PROFILE-SKIP ' "$log" | sed 's/^/  /'
    done
    echo
    printf '%s\n' "${summary[@]}"
    [ $bad = 0 ] && echo "test.sh --profiles: every profile passed" || echo "test.sh --profiles: FAILED"
    exit $bad
fi

while [ $# -gt 0 ]; do
    case $1 in
    --all) all=1 ;;
    --dry-run) dry=1 ;; # say what would run and what not, run nothing
    *) break ;;
    esac
    shift
done

root=0
[ "$(id -u)" = 0 ] && root=1

# package: the command (or file) that shows it is there
declare -A probe=(
    [iproute2]="ip" [python3]="python3" [iputils-ping]="ping" [util-linux]="setpriv"
    [procps]="kill sysctl" [tshark]="tshark" [gcc]="cc" [libibverbs-dev]="/usr/include/infiniband/mlx5dv.h"
    [ibverbs-utils]="ibv_devices ibv_devinfo" [perftest]="raw_ethernet_bw raw_ethernet_lat raw_ethernet_fs_rate"
    [curl]="curl" [prometheus_client]="py:prometheus_client"
    [dpdk-dev]="dpdk-testpmd" [librte-net-mlx5-23]="/usr/lib/$(uname -m)-linux-gnu/librte_net_mlx5.so.23"
)
# Packages from PyPI (for whichever python3 is first on PATH), not from apt.
pip_pkgs=" prometheus_client "
have() { # PACKAGE
    local p
    for p in ${probe[$1]}; do
        # type -P: an executable file (bash has a `kill` builtin, the tests run /bin/kill).
        if [[ $p == py:* ]]; then
            python3 -c "import ${p#py:}" 2>/dev/null || return 1
        elif [[ $p == /* ]]; then [ -r "$p" ] || return 1; else type -P "$p" >/dev/null || return 1; fi
    done
}
missing=()
for pkg in "${!probe[@]}"; do have "$pkg" || missing+=("$pkg"); done

if [ ${#missing[@]} -gt 0 ]; then
    if [ $root = 1 ] && [ $dry = 0 ] && command -v apt-get >/dev/null; then
        echo "test.sh: installing ${missing[*]}" >&2
        apt=() pip=()
        for pkg in "${missing[@]}"; do
            if [[ $pip_pkgs == *" $pkg "* ]]; then pip+=("$pkg"); else apt+=("$pkg"); fi
        done
        # python3 itself comes from apt first: pip needs it.
        if [ ${#apt[@]} -gt 0 ]; then
            # tshark asks whether non-root users may capture; answer before it asks.
            echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections 2>/dev/null
            if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt[@]}" >/dev/null; }; then
                echo "test.sh: apt-get install ${apt[*]} failed; the tests that need them are left out" >&2
            fi
        fi
        if [ ${#pip[@]} -gt 0 ] && ! python3 -m pip install -q --disable-pip-version-check "${pip[@]}" >/dev/null; then
            echo "test.sh: pip install ${pip[*]} failed; the tests that need them are left out" >&2
        fi
        missing=()
        for pkg in "${!probe[@]}"; do have "$pkg" || missing+=("$pkg"); done
    elif [ $root = 0 ]; then
        echo "test.sh: not root, so not installing ${missing[*]}" >&2
    fi
fi
lacks() { [[ " ${missing[*]} " == *" $1 "* ]]; }

# What a test needs that is not here, from its #[ignore] reason (empty: it can run).
unmet() { # REASON
    local r=$1 out=()
    if [[ $r == *"needs root"* ]]; then
        [ $root = 1 ] || out+=(root)
        for p in iproute2 python3 iputils-ping util-linux procps; do lacks $p && out+=("$p"); done
    fi
    [[ $r == *tshark* ]] && lacks tshark && out+=(tshark)
    [[ $r == *ibverbs-utils* ]] && lacks ibverbs-utils && out+=(ibverbs-utils)
    [[ $r == *perftest* ]] && lacks perftest && out+=(perftest)
    [[ $r == *curl* ]] && lacks curl && out+=(curl)
    [[ $r == *prometheus_client* ]] && lacks prometheus_client && out+=(prometheus_client)
    if [[ $r == *dpdk* ]]; then
        lacks dpdk-dev && out+=(dpdk-dev)
        lacks librte-net-mlx5-23 && out+=(librte-net-mlx5-23)
    fi
    if [[ $r == *libibverbs-dev* ]]; then
        lacks libibverbs-dev && out+=(libibverbs-dev)
        lacks gcc && out+=(gcc)
    fi
    echo "${out[*]}"
}

# Every #[ignore = "…"] test: "file<TAB>name<TAB>reason".
ignored=$(awk '
    match($0, /#\[ignore = "[^"]*"\]/) { reason = substr($0, RSTART + 12, RLENGTH - 14); next }
    reason != "" && match($0, /fn [A-Za-z0-9_]+/) {
        print FILENAME "\t" substr($0, RSTART + 3, RLENGTH - 3) "\t" reason; reason = ""
    }' $(git ls-files '*.rs' 2>/dev/null || find . -name '*.rs' -not -path './target/*'))
# Tests that are not ignored but call a tool outside Rust's reach: "file<TAB>name<TAB>package".
extra=$'crates/rawpkt-tools/tests/pktgen.rs\tctrl_c_prints_the_summary_and_exits_cleanly\tprocps'

skip=()
notrun=()
while IFS=$'\t' read -r file name reason; do
    [ -n "$name" ] || continue
    needs=$(unmet "$reason")
    if [ -n "$needs" ]; then
        skip+=(--skip "$name")
        notrun+=("$name ($file) needs: $needs")
    fi
done <<<"$ignored"
while IFS=$'\t' read -r file name pkg; do
    if lacks "$pkg"; then
        skip+=(--skip "$name")
        notrun+=("$name ($file) needs: $pkg")
    fi
done <<<"$extra"

if [ $dry = 1 ]; then
    echo "cargo test --workspace --features rawpkt/internals --no-fail-fast $* -- --include-ignored ${skip[*]}"
    [ ${#notrun[@]} = 0 ] || printf 'not run: %s\n' "${notrun[@]}"
    exit 0
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --workspace --features rawpkt/internals --no-fail-fast "$@" -- --include-ignored "${skip[@]}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}

read -r passed failed < <(awk '/^test result:/ { p += $4; f += $6 } END { print p + 0, f + 0 }' "$log")
echo
if [ ${#notrun[@]} -gt 0 ]; then
    echo "NOT RUN (${#notrun[@]} tests; not counted as passed):"
    printf '  %s\n' "${notrun[@]}"
    if [ $root = 0 ]; then
        echo "  (as root, scripts/test.sh installs the packages and runs them all)"
    fi
fi
if [ "$status" != 0 ]; then
    echo "FAILED:"
    sed -n 's/^test \(.*\) \.\.\. FAILED$/  \1/p' "$log"
    echo "test.sh: FAILED ($passed passed, $failed failed, ${#notrun[@]} not run; cargo test exited $status)"
    exit 1
elif [ ${#notrun[@]} -gt 0 ]; then
    echo "test.sh: PARTIAL: $passed passed, ${#notrun[@]} NOT RUN (listed above)"
    [ $all = 0 ] || { echo "test.sh: --all (or CI=true): every test must run" >&2; exit 1; }
else
    echo "test.sh: every test ran: $passed passed"
fi
