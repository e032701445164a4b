#!/usr/bin/env bash
# funnel-server under load, as the README's "Under load" section reports it:
#
# The load generator is the lab's `funnel-loadgen` example (crates/lab/examples/funnel-loadgen);
# the rules the servers read are in rules/, beside this script.
#
#   1. in process (part `floor`): `funnel-loadgen floor` (the same gRPC API answering OK without deciding)
#      against funnel-server with rules/bench.yaml (`client`, 100 a second); 100,000 calls, 64 in
#      flight over 4 connections, 10,000 keys;
#   2. on Redis (part `redis`): two funnel-servers with rules/bench-min.yaml (`client`, 100 a minute) sharing one
#      private redis-server, one with the deny cache (its default, 100,000 keys) and one
#      without; 50,000 calls, 90% on 10 hot keys, the Redis round trips read from /metrics.
#   3. the Redis timeout (part `timeouts`): one funnel-server per timeout in TIMEOUTS on one
#      private redis-server, rules/bench.yaml (every call admissible), no deny cache (every call a
#      round trip), the `closed` failure policy: each denial is a call the timeout turned
#      into a wrong answer; 50,000 calls, 64 in flight over 4 connections, 10,000 keys.
#
# Each pair of rows runs alternating, RUNS times (default 3); the script prints every run and
# the median per row. Everything listens on 127.0.0.1 on a free port; everything it starts is
# killed on exit. The parts on Redis need redis-server and redis-cli (Debian: apt-get install
# redis-server).
#
#   bash crates/lab/bench/server.sh
#
#   RUNS          runs per row (default 3)
#   RUN_TIMEOUT   seconds one loadgen run may take before it is killed (default 300)
#   BENCH_OUT     directory for the logs (default target/server-bench)
#   PARTS         the parts to run (default "floor redis timeouts")
#   TIMEOUTS      the Redis timeouts of part 3, in ms (default "10 25 50 100")
set -euo pipefail
. "$(dirname "$0")/lib.sh"
driver=server-bench
RUNS="${RUNS:-3}"
RUN_TIMEOUT="${RUN_TIMEOUT:-300}"
OUT="${BENCH_OUT:-target/server-bench}"
PARTS="${PARTS:-floor redis timeouts}"
TIMEOUTS="${TIMEOUTS:-10 25 50 100}"
part() { [[ " $PARTS " == *" $1 "* ]]; }
rules=crates/lab/bench/rules

[ "$RUNS" -ge 1 ] || fail "RUNS must be at least 1"
if part redis || part timeouts; then
  command -v redis-server >/dev/null 2>&1 || fail "redis-server is required (apt-get install redis-server)"
fi

cargo build --release -q -p funnel-server --bins
cargo build --release -q -p funnel-lab --example funnel-loadgen
loadgen="$release/examples/funnel-loadgen"
rm -rf "$OUT"; mkdir -p "$OUT"
logs=$OUT

# One loadgen run, bounded by its call count and by RUN_TIMEOUT; prints "<label> <output>".
load() {
  local label=$1; shift
  local result
  result=$(timeout "$RUN_TIMEOUT" "$loadgen" run "$@" 2>&1) ||
    fail "$label: funnel-loadgen failed or timed out: $result"
  echo "$label $(echo "$result" | tr '\n' ' ')" | tee -a "$OUT/rows.txt"
}

# The median of a row's decisions/s and the median run's whole line.
median_run() {
  grep "^$1 " "$OUT/rows.txt" |
    sed 's/.*decisions\/s=\([0-9]*\).*/\1 &/' | sort -n | awk '{l[NR] = $0} END {print l[int((NR + 1) / 2)]}' |
    cut -d' ' -f2-
}

echo "$driver: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) CPUs ($(cpu_model))"

# 1. In process against the floor.
rows=()
if part floor; then
  start_service floor "$loadgen" floor --grpc 127.0.0.1:0; floor=$grpc
  start_service inproc "$release/funnel-server" --config "$rules/bench.yaml" --grpc 127.0.0.1:0 --http 127.0.0.1:0 --no-watch
  inproc=$grpc
  common=(--requests 100000 --concurrency 64 --connections 4 --keys 10000)
  for i in $(seq "$RUNS"); do
    load "floor#$i" --target "$floor" "${common[@]}"
    load "in-process#$i" --target "$inproc" "${common[@]}"
  done
  rows+=(floor in-process)
fi

if part redis || part timeouts; then
  start_redis
  redis_url="redis://127.0.0.1:$redis_port/"
fi

# 2. On Redis, with and without the deny cache. Redis is emptied before each run, so every
# run starts from the same state.
if part redis; then
  start_service cache "$release/funnel-server" --config "$rules/bench-min.yaml" --grpc 127.0.0.1:0 --http 127.0.0.1:0 \
    --no-watch --redis "$redis_url"
  cache_grpc=$grpc cache_http=$http
  start_service nocache "$release/funnel-server" --config "$rules/bench-min.yaml" --grpc 127.0.0.1:0 --http 127.0.0.1:0 \
    --no-watch --redis "$redis_url" --deny-cache 0
  nocache_grpc=$grpc nocache_http=$http
  common=(--requests 50000 --concurrency 64 --connections 4 --keys 10000 --abusive-keys 10 --abusive-percent 90)
  for i in $(seq "$RUNS"); do
    redis-cli -p "$redis_port" flushall >/dev/null
    load "deny-cache#$i" --target "$cache_grpc" --metrics "$cache_http" "${common[@]}"
    redis-cli -p "$redis_port" flushall >/dev/null
    load "no-deny-cache#$i" --target "$nocache_grpc" --metrics "$nocache_http" "${common[@]}"
  done
  rows+=(deny-cache no-deny-cache)
fi

# 3. The Redis timeout: every call admissible, so each denial (`over=`) is a wrong one.
if part timeouts; then
  declare -A t_grpc t_http
  for t in $TIMEOUTS; do
    start_service "timeout-$t" "$release/funnel-server" --config "$rules/bench.yaml" --grpc 127.0.0.1:0 \
      --http 127.0.0.1:0 --no-watch --redis "$redis_url" --deny-cache 0 --redis-timeout-ms "$t"
    t_grpc[$t]=$grpc t_http[$t]=$http
  done
  common=(--requests 50000 --concurrency 64 --connections 4 --keys 10000)
  for i in $(seq "$RUNS"); do
    for t in $TIMEOUTS; do
      redis-cli -p "$redis_port" flushall >/dev/null
      load "timeout-${t}ms#$i" --target "${t_grpc[$t]}" --metrics "${t_http[$t]}" "${common[@]}"
    done
  done
  for t in $TIMEOUTS; do rows+=("timeout-${t}ms"); done
fi

echo
echo "$driver: medians (by decisions/s):"
for row in "${rows[@]}"; do
  echo "  $(median_run "$row#[0-9]*")"
done
