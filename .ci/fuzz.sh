#!/usr/bin/env bash
# Coverage-guided fuzzing of every crate's fuzz targets, for a bounded time each. Each crate
# has its own cargo-fuzz workspace (CONTRIBUTING.md, "Fuzzing"): `fuzz` for funnel,
# `crates/<crate>/fuzz` for the others.
#
# Optional: cargo-fuzz needs a nightly toolchain. Without one this prints why it skipped and
# exits 0; the same fuzz bodies still run on stable over the committed corpus and regression
# inputs in `cargo test` (each crate's fuzz replay test).
#
#   FUZZ_SECONDS   seconds per target (default 60)
#   FUZZ_TARGETS   space-separated targets (default: all of each workspace, `cargo fuzz list`)
#   FUZZ_DIRS      the cargo-fuzz workspaces to run (default: all four)
#
# New corpus entries go to <workspace>/target/ci-corpus/<target> (ignored), so a run never
# dirties the committed seed corpus <workspace>/corpus/<target>. A crash fails the run and
# leaves its input in <workspace>/artifacts/<target>/; minimise it with
# `cargo +nightly fuzz tmin <target> <file>` and keep it in the crate's
# tests/fuzz_regressions/<target>/.
#
# `--check` fuzzes nothing: it only checks, on the default (stable) toolchain, that every fuzz
# target of every workspace in FUZZ_DIRS builds (`cargo check`, in target/fuzz-check, so that
# it runs beside the workspace's own builds). CI runs this, as a few seconds of fuzzing a
# target would find little and cost minutes of builds.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_DIRS="${FUZZ_DIRS:-fuzz crates/funnel-tower/fuzz crates/funnel-redis/fuzz crates/funnel-server/fuzz}"

if [ "${1:-}" = --check ]; then
  for dir in $FUZZ_DIRS; do
    echo "fuzz: checking the targets of $dir"
    CARGO_TARGET_DIR="$PWD/target/fuzz-check" cargo check --locked --quiet \
      --manifest-path "$dir/Cargo.toml" --bins
  done
  echo "fuzz: every target of $FUZZ_DIRS builds"
  exit 0
fi

CARGO_FUZZ_VERSION=0.13.2
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"

skip() {
  printf 'fuzz: skipped: %s\n' "$*"
  printf 'fuzz: the same fuzz bodies run on stable over the committed inputs in cargo test (the fuzz replay test of each crate)\n'
  exit 0
}

command -v rustup >/dev/null 2>&1 || skip "rustup is not installed, so no nightly toolchain can be selected"
toolchains="$(rustup toolchain list)"
grep -q nightly <<<"$toolchains" || skip "no nightly toolchain (cargo-fuzz needs nightly for -Zsanitizer); install one with 'rustup toolchain install nightly'"

installed="$(cargo +nightly fuzz --version 2>/dev/null || true)"
if ! grep -qF "$CARGO_FUZZ_VERSION" <<<"$installed"; then
  echo "fuzz: installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo +nightly install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked ||
    skip "cargo-fuzz $CARGO_FUZZ_VERSION could not be installed from crates.io"
fi
cargo +nightly fuzz --version

run_dir() {
  local dir=$1
  (
    cd "$dir"
    local targets="${FUZZ_TARGETS:-$(cargo +nightly fuzz list)}"
    cargo +nightly fuzz build
    for target in $targets; do
      work="target/ci-corpus/$target"
      mkdir -p "$work" "corpus/$target"
      echo "fuzz: $dir/$target for ${FUZZ_SECONDS}s"
      if ! cargo +nightly fuzz run "$target" "$work" "corpus/$target" -- \
        -max_total_time="$FUZZ_SECONDS" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1; then
        echo "fuzz: $target FAILED; the input is in $dir/artifacts/$target/" >&2
        ls -l "artifacts/$target" >&2 || true
        exit 1
      fi
    done
  )
}
for dir in $FUZZ_DIRS; do
  run_dir "$dir"
done
echo "fuzz: all targets ran ${FUZZ_SECONDS}s without a failure"
