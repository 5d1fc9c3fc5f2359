#!/usr/bin/env bash
# Rewrites the exported-symbol table of docs/model-library.md (between the exports:begin and
# exports:end markers) from the model library's own table (crates/model-verbs/abi/exports.tsv and the
# symbols its sources implement, as crates/model-verbs/build.rs reads them). The test
# docs_table_lists_every_export fails while the table is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
RAWPKT_BLESS_DOCS=1 cargo test -q -p rawpkt-model-verbs --test abi docs_table_lists_every_export
