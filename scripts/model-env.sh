#!/usr/bin/env bash
# Runs a program on the model library instead of rdma-core: builds model-verbs (release), makes
# <target>/release/model-sonames/{libibverbs.so.1,libmlx5.so.1} links to it, and puts that
# directory first in LD_LIBRARY_PATH. The library needs nothing else: it writes its own fake
# sysfs tree (docs/model-library.md) and its four devices are mlx5_0..mlx5_3.
#
#   scripts/model-env.sh ibv_devinfo -v       # run one program on the model
#   eval "$(scripts/model-env.sh)"            # or set LD_LIBRARY_PATH in this shell
#
# Programs must be dynamically linked against libibverbs.so.1/libmlx5.so.1 (Debian's
# ibverbs-utils and perftest are); setuid programs ignore LD_LIBRARY_PATH.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
case "${1:-}" in
-h | --help)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
-*)
    echo "model-env.sh: unknown option $1 (usage: model-env.sh [PROGRAM ARGS...])" >&2
    exit 2
    ;;
esac
if ! out=$(cd "$root" && cargo build -q -p rawpkt-model-verbs --release 2>&1); then
    echo "model-env.sh: building the model library failed:" >&2
    echo "$out" >&2
    exit 1
fi
target="${CARGO_TARGET_DIR:-target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac
dir="$target/release/model-sonames"
mkdir -p "$dir"
for name in libibverbs.so.1 libmlx5.so.1; do
    ln -sfn ../librawpkt_model_verbs.so "$dir/$name"
done
path="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ $# -eq 0 ]; then
    printf 'export LD_LIBRARY_PATH=%q\n' "$path"
    exit 0
fi
if ! command -v "$1" >/dev/null; then
    echo "model-env.sh: $1: no such program" >&2
    exit 2
fi
export LD_LIBRARY_PATH="$path"
exec "$@"
