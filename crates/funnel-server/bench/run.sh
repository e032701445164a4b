#!/usr/bin/env bash
# funnel-server under load, as the README's "Under load" section reports it:
#
# The load generator is the lab's `funnel-loadgen` example (crates/lab/examples/funnel-loadgen).
#
#   1. in process (part `floor`): `funnel-loadgen floor` (the same gRPC API answering OK without deciding)
#      against funnel-server with bench.yaml (`client`, 100 a second); 100,000 calls, 64 in
#      flight over 4 connections, 10,000 keys;
#   2. on Redis (part `redis`): two funnel-servers with bench-min.yaml (`client`, 100 a minute) sharing one
#      private redis-server, one with the deny cache (its default, 100,000 keys) and one
#      without; 50,000 calls, 90% on 10 hot keys, the Redis round trips read from /metrics.
#   3. the Redis timeout (part `timeouts`): one funnel-server per timeout in TIMEOUTS on one
#      private redis-server, bench.yaml (every call admissible), no deny cache (every call a
#      round trip), the `closed` failure policy: each denial is a call the timeout turned
#      into a wrong answer; 50,000 calls, 64 in flight over 4 connections, 10,000 keys.
#
# Each pair of rows runs alternating, RUNS times (default 3); the script prints every run and
# the median per row. Everything listens on 127.0.0.1 on a free port; everything it starts is
# killed on exit. redis-server and redis-cli are required (Debian: apt-get install
# redis-server).
#
#   bash crates/funnel-server/bench/run.sh
#
#   RUNS          runs per row (default 3)
#   RUN_TIMEOUT   seconds one loadgen run may take before it is killed (default 300)
#   BENCH_OUT     directory for the logs (default target/server-bench)
#   PARTS         the parts to run (default "floor redis timeouts")
#   TIMEOUTS      the Redis timeouts of part 3, in ms (default "10 25 50 100")
set -euo pipefail
cd "$(dirname "$0")/../../.."
RUNS="${RUNS:-3}"
RUN_TIMEOUT="${RUN_TIMEOUT:-300}"
OUT="${BENCH_OUT:-target/server-bench}"
PARTS="${PARTS:-floor redis timeouts}"
TIMEOUTS="${TIMEOUTS:-10 25 50 100}"
part() { [[ " $PARTS " == *" $1 "* ]]; }
here=crates/funnel-server/bench

fail() { echo "server-bench: FAIL: $*" >&2; exit 1; }
[ "$RUNS" -ge 1 ] || fail "RUNS must be at least 1"
command -v redis-server >/dev/null 2>&1 || fail "redis-server is required (apt-get install redis-server)"
command -v redis-cli >/dev/null 2>&1 || fail "redis-cli is required (apt-get install redis-server)"

cargo build --release -q -p funnel-server --bins
cargo build --release -q -p funnel-lab --example funnel-loadgen
bin="${CARGO_TARGET_DIR:-target}/release"
loadgen="$bin/examples/funnel-loadgen"
rm -rf "$OUT"; mkdir -p "$OUT"
redis_dir=$(mktemp -d "${TMPDIR:-/tmp}/funnel-server-bench-redis.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$redis_dir"
}
trap cleanup EXIT

# Starts a server that prints "... listening grpc=ADDR [http=ADDR]" on stdout once bound
# (port 0: the system picks a free port) and sets $grpc and $http.
start() {
  local name=$1; shift
  "$@" >"$OUT/$name.out" 2>"$OUT/$name.log" &
  pids+=("$!")
  for _ in $(seq 200); do
    grpc=$(sed -n 's/.*listening grpc=\([^ ]*\).*/\1/p' "$OUT/$name.out")
    http=$(sed -n 's/.*listening .* http=\([^ ]*\).*/\1/p' "$OUT/$name.out")
    [ -n "$grpc" ] && return 0
    sleep 0.05
  done
  fail "$name did not start: $(cat "$OUT/$name.out" "$OUT/$name.log")"
}

# A private redis-server on a free loopback port, no persistence. redis-server cannot pick
# its own port, so a port that answers no connection is chosen, and the server is checked to
# be ours (its process_id) once it answers PING; a port taken in between is retried.
start_redis() {
  local try port pid
  for try in 1 2 3; do
    port=$((20000 + RANDOM % 40000))
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then continue; fi
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --dir "$redis_dir" --logfile "$redis_dir/redis-$try.log" &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 100); do
      if [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ]; then
        if redis-cli -p "$port" info server | tr -d '\r' | grep -qx "process_id:$pid"; then
          redis_port=$port
          return 0
        fi
        break
      fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
  done
  fail "redis-server did not start: $(tail -n 5 "$redis_dir"/redis-*.log 2>/dev/null)"
}

# One loadgen run, bounded by its call count and by RUN_TIMEOUT; prints "<label> <output>".
load() {
  local label=$1; shift
  local result
  result=$(timeout "$RUN_TIMEOUT" "$loadgen" run "$@" 2>&1) ||
    fail "$label: funnel-loadgen failed or timed out: $result"
  echo "$label $(echo "$result" | tr '\n' ' ')" | tee -a "$OUT/rows.txt"
}

# The median of a row's decisions/s and the median run's whole line.
median() {
  grep "^$1 " "$OUT/rows.txt" |
    sed 's/.*decisions\/s=\([0-9]*\).*/\1 &/' | sort -n | awk '{l[NR] = $0} END {print l[int((NR + 1) / 2)]}' |
    cut -d' ' -f2-
}

echo "server-bench: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) CPUs ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo))"

# 1. In process against the floor.
rows=()
if part floor; then
  start floor "$loadgen" floor --grpc 127.0.0.1:0; floor=$grpc
  start inproc "$bin/funnel-server" --config "$here/bench.yaml" --grpc 127.0.0.1:0 --http 127.0.0.1:0 --no-watch
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
  start cache "$bin/funnel-server" --config "$here/bench-min.yaml" --grpc 127.0.0.1:0 --http 127.0.0.1:0 \
    --no-watch --redis "$redis_url"
  cache_grpc=$grpc cache_http=$http
  start nocache "$bin/funnel-server" --config "$here/bench-min.yaml" --grpc 127.0.0.1:0 --http 127.0.0.1:0 \
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
    start "timeout-$t" "$bin/funnel-server" --config "$here/bench.yaml" --grpc 127.0.0.1:0 \
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
echo "server-bench: medians (by decisions/s):"
for row in "${rows[@]}"; do
  echo "  $(median "$row#[0-9]*")"
done
