#!/usr/bin/env bash
# Builds the vendored redis-cell module (vendor/redis-cell-0.5.0.tar.gz, see vendor/README.md)
# into target/redis-cell/ and prints the path of the library `redis-server --loadmodule` takes.
# The tests and the comparison harness look for it there (or where FUNNEL_REDIS_CELL points):
#
#   bash .ci/redis-cell.sh                       # build once; later runs only print the path
#   FUNNEL_REDIS_CELL=$(bash .ci/redis-cell.sh) cargo test --release -p funnel-redis --test it cell::
#
# Cached: nothing is rebuilt while the library is there and was built from the same tarball
# (a stamp holds the tarball's checksum). The build's own output goes to stderr, so stdout is
# the path alone. It needs what any Rust build needs (cargo, a C compiler: the module compiles
# a small C stub) and crates.io for the module's dependencies, pinned by its Cargo.lock.
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.5.0
tarball="$PWD/vendor/redis-cell-$version.tar.gz"
out="$PWD/target/redis-cell"
src="$out/redis-cell-$version"
stamp="$out/stamp"
case "$(uname -s)" in
  Darwin) lib_name=libredis_cell.dylib ;;
  *) lib_name=libredis_cell.so ;;
esac
lib="$out/$lib_name"

fail() { printf 'redis-cell.sh: %s\n' "$*" >&2; exit 1; }
[ -f "$tarball" ] || fail "$tarball is missing"
sum=$(sha256sum "$tarball" | cut -d' ' -f1)

if [ -f "$lib" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sum" ]; then
  echo "$lib"
  exit 0
fi

command -v cargo >/dev/null 2>&1 || fail "cargo is not installed"
echo "redis-cell.sh: building redis-cell $version into $out" >&2
rm -rf "$src" "$lib" "$stamp"
mkdir -p "$out"
tar -xzf "$tarball" -C "$out"
[ -f "$src/Cargo.toml" ] || fail "the tarball did not unpack into $src"
# The unpacked copy sits below funnel's workspace root, and Cargo would take it for a stray
# member of funnel's workspace: an empty [workspace] table makes it a workspace of its own.
printf '\n[workspace]\n' >>"$src/Cargo.toml"
CARGO_TARGET_DIR="$out/build" cargo build --release --locked \
  --manifest-path "$src/Cargo.toml" >&2 ||
  fail "the build failed (the module needs Rust 1.85 or later: it is edition 2024)"
cp "$out/build/release/$lib_name" "$lib"
echo "$sum" >"$stamp"
echo "$lib"
