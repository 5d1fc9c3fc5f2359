#!/usr/bin/env bash
# The soak (docs/soak.md): 10^9 packets through a cross-connect between two model NICs, both
# directions, with faults of every kind injected throughout; ends with every pool full and every
# counter balanced, or fails. Not in CI (CI runs the same test with 2·10^6 packets).
#
#   bash scripts/soak.sh [PACKETS] [FAULT_EVERY]     (defaults 1e9 and 64; RAWPKT_SOAK_SEED too)
set -euo pipefail
cd "$(dirname "$0")/.."
export RAWPKT_SOAK_PACKETS=${1:-1e9} RAWPKT_SOAK_FAULT_EVERY=${2:-64}
cargo test --release -p rawpkt --features internals --no-run --test soak
# Wall time and peak memory of the run itself (GNU time's -f).
/usr/bin/time -f 'soak: wall %e s, user %U s, max RSS %M KiB' \
    cargo test --release -p rawpkt --features internals --quiet --test soak -- --nocapture
