#!/usr/bin/env bash
# Loom models of the keyed table's slot protocol (src/table/loom.rs): one model per race in
# docs/design/slot-protocol.md, "Why each race comes out right", each on a one- or two-bucket table; of its
# growth (src/table/grow/loom.rs); and of the policies built on it (src/multi/loom.rs).
#
# * The crate's own cfg, `funnel_loom`, never the global `loom` one (which would switch every
#   crate in the graph that checks it).
# * Its own target directory (target/loom, or $FUNNEL_LOOM_TARGET_DIR), so the loom build does
#   not invalidate the ordinary one.
# * LOOM_MAX_PREEMPTIONS defaults to 3: two to three minutes for all models on one core once
#   built, four models taking most of it (2: seconds). The build itself (loom and the crate in
#   release) takes about a minute.
# * One model at a time: two at once on two cores were no faster (loom's executions spend as
#   much time in the kernel as in the models, and two contend there).
# * Extra arguments go to the test harness: `bash .ci/loom.sh --include-ignored` also runs the
#   one ignored model, a reproducer of the generation-ABA residual, which fails today.
set -euo pipefail
cd "$(dirname "$0")/.."

export RUSTFLAGS="${RUSTFLAGS:-} --cfg funnel_loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-3}"
export CARGO_TARGET_DIR="${FUNNEL_LOOM_TARGET_DIR:-target/loom}"

cargo test --release --lib ::loom:: -- --test-threads 1 --nocapture "$@"
