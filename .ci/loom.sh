#!/usr/bin/env bash
# Loom models of the keyed table's slot protocol (src/table/loom.rs): one model per race in
# docs/DESIGN.md, "Why each race comes out right", each on a one- or two-bucket table; of its
# growth (src/table/grow/loom.rs); and of the policies built on it (src/multi/loom.rs).
#
# * The crate's own cfg, `funnel_loom`, never the global `loom` one (which would switch every
#   crate in the graph that checks it).
# * Its own target directory (target/loom, or $FUNNEL_LOOM_TARGET_DIR), so the loom build does
#   not invalidate the ordinary one.
# * LOOM_MAX_PREEMPTIONS defaults to 3: about 10 s for all models on 2 cores once built (2: about
#   2 s; 4: about a minute). The build itself (loom and the crate in release) takes minutes.
# * Extra arguments go to the test harness: `bash .ci/loom.sh --include-ignored` also runs the
#   one ignored model, a reproducer of the generation-ABA residual, which fails today.
set -euo pipefail
cd "$(dirname "$0")/.."

export RUSTFLAGS="${RUSTFLAGS:-} --cfg funnel_loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export CARGO_TARGET_DIR="${FUNNEL_LOOM_TARGET_DIR:-target/loom}"

cargo test --release --lib ::loom:: -- --test-threads 1 --nocapture "$@"
