#!/usr/bin/env bash
# funnel-server side by side with limitador-server (Kuadrant's Envoy rate-limit service).
#
# The same gRPC workload (the lab's `funnel-loadgen run`: CALLS calls after WARMUP, 64 in
# flight over 4 connections, 10,000 keys of one descriptor) against, each on a fresh server
# per run, the rows alternating, RUNS times (default 3):
#
#   floor              `funnel-loadgen floor`: the same gRPC API answering OK without deciding
#   funnel-memory      funnel-server, in memory
#   funnel-memory-1t   funnel-server, in memory, on one thread (--worker-threads 1), as
#                      limitador-server serves gRPC: on its one-threaded main runtime
#   limitador-memory   limitador-server, `memory` storage
#   funnel-redis       funnel-server on Redis (its default deny cache)
#   limitador-redis    limitador-server, `redis` storage
#   limitador-cached   limitador-server, `redis_cached` storage (its defaults)
#
# The Redis rows need redis-server and redis-cli (apt-get install redis-server); without them
# they are left out with a notice. They share one private redis-server, emptied before each run.
#
# Both servers get the same limit on the same descriptor (domain `bench`, key `client`, each
# value counted apart): 1,000,000 a minute, which no key of the workload comes near, so every
# call is admissible and every denial is a wrong one. Per run and row: calls/s, p50, p99,
# p99.9 (the load generator's, after its warm-up), the server's CPU per call (utime+stime of
# the server's process from /proc/PID/stat before and after the load generator's whole run,
# warm-up included, divided by every call it answered: warm-up + measured), the server's RSS
# after the run, wrong denials (OVER_LIMIT answers) and failed calls (gRPC errors). Both
# servers run with their defaults: funnel-server on Redis denies a call whose round trip
# outlives --redis-timeout-ms (its `closed` policy), and says so in the log and on stderr;
# limitador-server's `redis` storage waits for Redis however long it takes.
#
# Then, unless EXACT=0, a workload where the limit bites: 100 a day on 10 keys, 20,000 calls
# without warm-up, so every key asks far more than its limit and the run ends long before any
# refill; a server that counts exactly admits 10 x 100 = 1,000. The table gives each row's
# admitted calls and the difference (over-admission when positive).
#
# Targets: funnel-server's p99.9 no worse than limitador-server's on the same run
# (memory against memory, Redis against Redis), and funnel-server's CPU per call within 10% of
# the floor's. The script prints both checks from the medians, the p99.9 one also as the median
# of each run's own ratio (the rows of one run ran seconds apart).
#
# limitador-server is not on crates.io. The limitador-* rows take its binary from
# LIMITADOR_SERVER, else `limitador-server` on PATH. Build it with
#     cargo install --git https://github.com/Kuadrant/limitador --locked limitador-server
# (needs protoc and clang/libclang: apt-get install protobuf-compiler clang libclang-dev).
# The lab's binary is built as follows: limitador-server 2.4.0-dev, Kuadrant/limitador
# commit 2981b2bd389d42cf668519f9aa981a53541c4278 (2026-05-07), default features (`memory`,
# `disk` and `redis` storages, no `distributed_storage`), its own Cargo.lock (`--locked`) and
# release profile (lto = true, codegen-units = 1), rustc 1.95.0, built from the repository's
# tree with `cargo build --release --locked -p limitador-server`; the .proto files it compiles
# are the ones vendored in its tree (limitador-server/vendor/protobufs), nothing supplied.
#
#   bash crates/lab/bench/limitador.sh
#
# With INSTRUCTIONS=1 each server runs under callgrind (apt-get install valgrind), its
# instrumentation off until the warm-up calls (a load generator run of their own) are
# answered, then on for the CALLS measured ones; the table gives the server's instructions per
# measured call (every thread's, the kernel's excluded). Unlike CPU time, the count does not
# move with the host's speed, so it compares two servers' cost per call on a shared or
# drifting machine; but it weighs a cache miss or a lock wait like any instruction. Under
# callgrind the threads take turns, so the latencies of that mode mean nothing and are not
# shown; CALLS defaults to 20000 there, and the workload where the limit bites is not run.
#
#   LIMITADOR_SERVER  the limitador-server binary (default: `limitador-server` on PATH)
#   RUNS              runs per row (default 3)
#   CALLS             measured calls per run (default 100000; 20000 with INSTRUCTIONS=1)
#   WARMUP            calls before measuring (default 10000)
#   ROWS              the rows to run (default: all of the above; Redis rows need redis-server)
#   RATE              calls a second in all, sent on a schedule (the load generator's --rate):
#                     every row then carries the same load, and their tails compare at it
#                     (default: none, each of the 64 callers sends as soon as it is answered,
#                     which measures each server at saturation)
#   EXACT             1 (default): the workload where the limit bites too; 0: not
#   INSTRUCTIONS      1: count each server's instructions per call under valgrind's callgrind
#                     instead of timing it (see below); 0 (default): time it
#   PIN               1: each server on the machine's last CPU and the load generator on the
#                     others (taskset; needs 2 CPUs or more), so that the two do not take
#                     turns on one CPU; redis-server is not pinned. 0 (default): not pinned
#   RUN_TIMEOUT       seconds one load generator run may take before it is killed (default 300)
#   BENCH_OUT         directory for the logs (default target/limitador-bench)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
RUNS="${RUNS:-3}"
INSTRUCTIONS="${INSTRUCTIONS:-0}"
if [ "$INSTRUCTIONS" = 1 ]; then
  if ! command -v valgrind >/dev/null 2>&1 || ! command -v callgrind_control >/dev/null 2>&1; then
    fail "INSTRUCTIONS=1 needs valgrind's callgrind (apt-get install valgrind)"
  fi
  CALLS="${CALLS:-20000}"
  EXACT=0
else
  [ "$INSTRUCTIONS" = 0 ] || fail "INSTRUCTIONS must be 0 or 1"
  CALLS="${CALLS:-100000}"
fi
WARMUP="${WARMUP:-10000}"
EXACT="${EXACT:-1}"
PIN="${PIN:-0}"
case $PIN in
  0) ;;
  1)
    [ "$INSTRUCTIONS" = 0 ] || fail "PIN=1 is for timing; callgrind's threads take turns anyway"
    command -v taskset >/dev/null 2>&1 || fail "PIN=1 needs taskset (apt-get install util-linux)"
    [ "$(nproc)" -ge 2 ] || fail "PIN=1 needs 2 CPUs or more"
    ;;
  *) fail "PIN must be 0 or 1" ;;
esac
RATE="${RATE:-}"
pace=()
if [ -n "$RATE" ]; then
  [[ "$RATE" =~ ^[1-9][0-9]*$ ]] || fail "RATE must be a whole number of calls a second"
  pace=(--rate "$RATE")
fi
RUN_TIMEOUT="${RUN_TIMEOUT:-300}"
OUT="${BENCH_OUT:-target/limitador-bench}"
ROWS="${ROWS:-floor funnel-memory funnel-memory-1t limitador-memory funnel-redis limitador-redis limitador-cached}"

note() { echo "limitador-bench: $*" >&2; }
[[ "$RUNS" =~ ^[1-9][0-9]*$ ]] || fail "RUNS must be a whole number of at least 1"
[[ "$CALLS" =~ ^[1-9][0-9]*$ ]] || fail "CALLS must be a whole number of at least 1"
[[ "$WARMUP" =~ ^[0-9]+$ ]] || fail "WARMUP must be a whole number"

rows=()
for row in $ROWS; do
  case $row in
    floor | funnel-memory | funnel-memory-1t | limitador-memory) rows+=("$row") ;;
    funnel-redis | limitador-redis | limitador-cached)
      if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
        rows+=("$row")
      else
        note "SKIP $row: redis-server and redis-cli are needed (apt-get install redis-server)"
      fi
      ;;
    *) fail "unknown row '$row'" ;;
  esac
done
[ "${#rows[@]}" -ge 1 ] || fail "no row to run"
# limitador-server, needed by the limitador-* rows only.
limitador=
if [[ " ${rows[*]} " == *" limitador-"* ]]; then
  limitador="${LIMITADOR_SERVER:-$(command -v limitador-server || true)}"
  if [ -z "$limitador" ] || [ ! -x "$limitador" ]; then
    fail "limitador-server not found (set LIMITADOR_SERVER=/path/to/limitador-server or put it on PATH).
  It is not on crates.io; build it with
    apt-get install -y protobuf-compiler clang libclang-dev
    cargo install --git https://github.com/Kuadrant/limitador --locked limitador-server"
  fi
fi
needs_redis() {
  local row
  for row in "${rows[@]}"; do
    case $row in *-redis | *-cached) return 0 ;; esac
  done
  return 1
}

cargo build --release -q -p funnel-server --bins
cargo build --release -q -p funnel-lab --example funnel-loadgen
bin=$release
loadgen="$bin/examples/funnel-loadgen"
rm -rf "$OUT"; mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
# What each server is started under: callgrind, its instrumentation off, with INSTRUCTIONS=1
# (then it starts far slower, so limitador-server is waited for longer).
# With PIN=1 the servers run on the last CPU the process may use, the load generator on the
# others.
wrap=() start_polls=200 client=()
if [ "$INSTRUCTIONS" = 1 ]; then
  wrap=(valgrind --tool=callgrind --instr-atstart=no "--callgrind-out-file=$OUT/callgrind.%p")
  start_polls=1200
elif [ "$PIN" = 1 ]; then
  mapfile -t cpus < <(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' |
    awk -F- '{for (c = $1; c <= ($2 == "" ? $1 : $2); c++) print c}')
  [ "${#cpus[@]}" -ge 2 ] || fail "PIN=1 needs 2 CPUs or more; this process may use ${cpus[*]}"
  last=$((${#cpus[@]} - 1))
  wrap=(taskset -c "${cpus[$last]}")
  client=(taskset -c "$(IFS=,; echo "${cpus[*]:0:$last}")")
fi
logs=$OUT
scratch=$work

# The limits, written for each server in its own format. limitador-server watches its limits
# file's directory, so each of its files gets a directory of its own.
# $1: name, $2: requests, $3: funnel-server's unit, $4: limitador-server's window in seconds.
write_limits() {
  mkdir -p "$scratch/$1"
  cat >"$scratch/$1/funnel.yaml" <<EOF
domain: bench
descriptors:
  - key: client
    rate_limit: { unit: $3, requests_per_unit: $2 }
EOF
  cat >"$scratch/$1/limits.yaml" <<EOF
- namespace: bench
  max_value: $2
  seconds: $4
  conditions: []
  variables:
    - descriptors[0].client
EOF
}
write_limits open 1000000 minute 60
exact_limit=100 exact_keys=10 exact_calls=20000
write_limits exact "$exact_limit" day 86400

# Whether process $1 listens on 127.0.0.1 port $2 (/proc/net/tcp: LISTEN is state 0A; the
# socket's inode is among the process's descriptors).
listens() {
  local pid=$1 hex inode
  hex=$(printf '0100007F:%04X' "$2")
  while read -r inode; do
    if find "/proc/$pid/fd" -lname "socket:\[$inode\]" 2>/dev/null | grep -q .; then return 0; fi
  done < <(awk -v a="$hex" '$2 == a && $4 == "0A" {print $10}' /proc/net/tcp)
  return 1
}

# Starts limitador-server on free ports (its gRPC and its HTTP API), ready once the process
# itself listens on the gRPC port; a port taken in between is retried. $1: name, $2: limits
# file, the rest: its storage arguments. Sets $server_pid and $grpc.
start_limitador() {
  local name=$1 limits=$2 try rls http; shift 2
  for try in 1 2 3; do
    rls=$(free_port) http=$(free_port)
    spawn "${wrap[@]}" "$limitador" --rls-ip 127.0.0.1 --rls-port "$rls" --http-ip 127.0.0.1 --http-port "$http" \
      "$limits" "$@" >"$OUT/$name.out" 2>"$OUT/$name.log"
    server_pid=$started_pid
    for _ in $(seq "$start_polls"); do
      if listens "$server_pid" "$rls"; then grpc=127.0.0.1:$rls; return 0; fi
      kill -0 "$server_pid" 2>/dev/null || break
      sleep 0.05
    done
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  done
  fail "$name did not start: $(tail -n 5 "$OUT/$name.out" "$OUT/$name.log")"
}

stop() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}

# Starts row $1's server with limits $2 (a directory made by write_limits); sets
# $server_pid and $grpc, and $metrics to the load generator's --metrics flag for funnel-server
# on Redis (its Redis round trips and timeouts, in the log). Redis is emptied first, so every
# run starts from the same state.
start_row() {
  local row=$1 limits=$2 name="$1-$3"
  metrics=()
  case $row in
    *-redis | *-cached) redis-cli -p "$redis_port" flushall >/dev/null ;;
  esac
  case $row in
    floor) start_service "$name" "${wrap[@]}" "$loadgen" floor --grpc 127.0.0.1:0 ;;
    funnel-memory)
      start_service "$name" "${wrap[@]}" "$bin/funnel-server" --config "$limits/funnel.yaml" \
        --grpc 127.0.0.1:0 --http 127.0.0.1:0 --no-watch
      ;;
    funnel-memory-1t)
      start_service "$name" "${wrap[@]}" "$bin/funnel-server" --config "$limits/funnel.yaml" \
        --grpc 127.0.0.1:0 --http 127.0.0.1:0 --no-watch --worker-threads 1
      ;;
    funnel-redis)
      start_service "$name" "${wrap[@]}" "$bin/funnel-server" --config "$limits/funnel.yaml" \
        --grpc 127.0.0.1:0 --http 127.0.0.1:0 --no-watch --redis "$redis_url"
      metrics=(--metrics "$http")
      ;;
    limitador-memory) start_limitador "$name" "$limits/limits.yaml" memory ;;
    limitador-redis) start_limitador "$name" "$limits/limits.yaml" redis "$redis_url" ;;
    limitador-cached) start_limitador "$name" "$limits/limits.yaml" redis_cached "$redis_url" ;;
  esac
  case $row in floor | funnel-*) server_pid=$started_pid ;; esac
}

# utime + stime of process $1, in clock ticks (fields 14 and 15 of /proc/PID/stat, counted
# after the command name, which may hold spaces).
cpu_ticks() {
  local stat
  stat=$(cat "/proc/$1/stat")
  stat=${stat##*) }
  awk '{print $12 + $13}' <<<"$stat"
}
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
ticks_per_s=$(getconf CLK_TCK)

# A latency as the load generator prints it (Rust's Duration: 812.5µs, 1.2ms, ...) in µs.
micros() {
  awk -v d="$1" 'BEGIN {
    if (d ~ /ns$/) { sub(/ns$/, "", d); print d / 1000 }
    else if (d ~ /ms$/) { sub(/ms$/, "", d); print d * 1000 }
    else if (d ~ /s$/ && d !~ /[^0-9.]s$/) { sub(/s$/, "", d); print d * 1000000 }
    else { sub(/[^0-9.]+s$/, "", d); print d + 0 }
  }'
}

# One load generator run against $grpc, bounded by RUN_TIMEOUT; sets $result. Failed calls
# are counted, not fatal: the loadgen still prints its line.
load() {
  local label=$1; shift
  result=$(timeout "$RUN_TIMEOUT" "${client[@]}" "$loadgen" run --target "$grpc" "$@" 2>&1) || true
  echo "$label $result" >>"$OUT/loadgen.txt"
  [[ "$result" == *calls=* ]] || fail "$label: funnel-loadgen failed or timed out: $result"
  local timeouts
  timeouts=$(field redis_timeouts)
  if [ -n "$timeouts" ] && [ "$timeouts" != 0 ]; then
    note "$label: $timeouts Redis round trips outlived funnel-server's --redis-timeout-ms"
  fi
}
# A field of the load generator's line ("name=value").
field() { tr ' ' '\n' <<<"$result" | awk -F= -v k="$1" '$1 == k {print $2; exit}'; }

echo "limitador-bench: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) CPUs ($(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo))"
[ -z "$limitador" ] || echo "limitador-bench: $("$limitador" --version 2>&1 | head -n 1)"
echo "limitador-bench: $CALLS calls after $WARMUP, 64 callers over 4 connections, ${RATE:+$RATE calls/s on a schedule, }10000 keys, every call admissible"
[ "$PIN" = 0 ] || echo "limitador-bench: servers on CPU ${wrap[2]}, the load generator on CPU ${client[2]}"
if needs_redis; then
  start_redis
  redis_url="redis://127.0.0.1:$redis_port/"
fi

# Rows: "row run calls/s p50 p99 p99.9 cpu_us_per_call rss_mib wrong_denials failed"
# The instructions callgrind counted for process $1 (the files it dumped, summed).
instructions() {
  local f total=0 n
  for f in "$OUT/callgrind.$1" "$OUT/callgrind.$1".*; do
    [ -f "$f" ] || continue
    n=$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ && $1 != "." {gsub(",", "", $1); print $1}')
    total=$((total + ${n:-0}))
  done
  echo "$total"
}
if [ "$INSTRUCTIONS" = 1 ]; then
  # Rows: "row run instructions_per_call"
  : >"$OUT/instructions.txt"
  for i in $(seq "$RUNS"); do
    for row in "${rows[@]}"; do
      start_row "$row" "$scratch/open" "$i"
      [ "$WARMUP" = 0 ] || load "$row#$i-warmup" --requests "$WARMUP" --warmup 0 --concurrency 64 --connections 4 --keys 10000
      callgrind_control --instr=on "$server_pid" >/dev/null 2>&1
      load "$row#$i" --requests "$CALLS" --warmup 0 --concurrency 64 --connections 4 --keys 10000
      callgrind_control --instr=off "$server_pid" >/dev/null 2>&1
      callgrind_control --dump "$server_pid" >/dev/null 2>&1
      stop "$server_pid"
      [ "$(field failed)" = 0 ] || fail "$row#$i: $(field failed) calls failed"
      n=$(instructions "$server_pid")
      [ "$n" -gt 0 ] || fail "$row#$i: callgrind counted nothing (see $OUT/callgrind.$server_pid*)"
      echo "$row $i $((n / (CALLS / 64 * 64)))" | tee -a "$OUT/instructions.txt" >&2
    done
  done
  echo
  echo "Instructions per call (callgrind; median of $RUNS runs, and against the floor's):"
  echo
  echo '| row | instructions per call | against the floor |'
  echo '|---|--:|--:|'
  floor_n=$(awk '$1 == "floor" {print $3}' "$OUT/instructions.txt" | median)
  for row in "${rows[@]}"; do
    m=$(awk -v r="$row" '$1 == r {print $3}' "$OUT/instructions.txt" | median)
    awk -v r="$row" -v m="$m" -v f="$floor_n" 'BEGIN {
      printf "| %s | %.0f | %s |\n", r, m, (f == "-" ? "" : sprintf("%+.1f%%", (m / f - 1) * 100)) }'
  done
  echo
  echo "limitador-bench: logs in $OUT"
  exit 0
fi

: >"$OUT/rows.txt"
for i in $(seq "$RUNS"); do
  for row in "${rows[@]}"; do
    start_row "$row" "$scratch/open" "$i"
    before=$(cpu_ticks "$server_pid")
    load "$row#$i" "${metrics[@]}" "${pace[@]}" --requests "$CALLS" --warmup "$WARMUP" --concurrency 64 --connections 4 --keys 10000
    after=$(cpu_ticks "$server_pid")
    rss=$(rss_kib "$server_pid")
    stop "$server_pid"
    answered=$((CALLS / 64 * 64 + WARMUP / 64 * 64))
    cpu=$(awk -v t=$((after - before)) -v hz="$ticks_per_s" -v n="$answered" \
      'BEGIN {printf "%.1f", t / hz / n * 1e6}')
    printf '%s %s %s %s %s %s %s %s %s %s\n' "$row" "$i" "$(field 'decisions/s')" \
      "$(micros "$(field p50)")" "$(micros "$(field p99)")" "$(micros "$(field p99.9)")" \
      "$cpu" "$(awk -v k="$rss" 'BEGIN {printf "%.1f", k / 1024}')" "$(field over)" \
      "$(field failed)" | tee -a "$OUT/rows.txt" >&2
  done
done

header='| row | run | calls/s | p50 µs | p99 µs | p99.9 µs | server CPU µs/call | RSS MiB | wrong denials | failed |'
rule='|---|---|--:|--:|--:|--:|--:|--:|--:|--:|'
echo
echo "Every run:"
echo
echo "$header"; echo "$rule"
awk '{printf "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10}' "$OUT/rows.txt"

# The median of each column of a row, over its runs.
median_row() {
  awk -v row="$1" '$1 == row {n++; for (c = 3; c <= 10; c++) v[c, n] = $c}
    END {
      printf "%s %d", row, n
      for (c = 3; c <= 10; c++) {
        for (i = 1; i <= n; i++) s[i] = v[c, i]
        for (i = 2; i <= n; i++) for (j = i; j > 1 && s[j - 1] + 0 > s[j] + 0; j--) {
          t = s[j]; s[j] = s[j - 1]; s[j - 1] = t
        }
        m = n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2
        printf " %s", m
      }
      printf "\n"
    }' "$OUT/rows.txt"
}
: >"$OUT/medians.txt"
for row in "${rows[@]}"; do median_row "$row" >>"$OUT/medians.txt"; done
echo
echo "Median per row ($RUNS runs):"
echo
echo "${header/| run |/| runs |}"; echo "$rule"
awk '{printf "| %s | %s | %.0f | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8, $9, $10}' "$OUT/medians.txt"

col() { awk -v row="$1" -v c="$2" '$1 == row {print $c}' "$OUT/medians.txt"; }
echo
# The median over the runs of each run's own p99.9 ratio of rows $1 and $2 (the two rows of
# one run ran seconds apart, so a drift of the host's speed between runs cancels out).
run_ratio() {
  awk -v a="$1" -v b="$2" '$1 == a {x[$2] = $6} $1 == b {y[$2] = $6}
    END {for (r in x) if ((r in y) && y[r] > 0) print x[r] / y[r]}' "$OUT/rows.txt" | median
}
check_p999() {
  local f l
  f=$(col "$1" 6) l=$(col "$2" 6)
  [ -n "$f" ] && [ -n "$l" ] || return 0
  awk -v f="$f" -v l="$l" -v a="$1" -v b="$2" -v r="$(run_ratio "$1" "$2")" 'BEGIN {
    printf "check: %s p99.9 %s µs, %s p99.9 %s µs (%.2fx; median of the runs%s own ratios %.2fx): %s\n",
      a, f, b, l, f / l, "\047", r, (f <= l ? "met" : "MISSED") }'
}
check_p999 funnel-memory limitador-memory
check_p999 funnel-memory-1t limitador-memory
check_p999 funnel-redis limitador-redis
fl=$(col floor 7) fm=$(col funnel-memory 7)
if [ -n "$fl" ] && [ -n "$fm" ]; then
  awk -v f="$fm" -v l="$fl" 'BEGIN {
    printf "check: funnel-memory CPU %s µs/call, floor %s µs/call (%+.0f%%): %s\n", f, l,
      (f / l - 1) * 100, (f <= l * 1.10 ? "met" : "MISSED") }'
fi

# The workload where the limit bites: exactly-counting servers admit keys x limit.
if [ "$EXACT" = 1 ]; then
  expected=$((exact_limit * exact_keys))
  echo
  echo "Where the limit bites: $exact_limit a day on each of $exact_keys keys, $exact_calls calls, 64 in flight; an exact count admits $expected:"
  echo
  echo '| row | admitted | denied | failed | over-admitted |'
  echo '|---|--:|--:|--:|--:|'
  for row in "${rows[@]}"; do
    [ "$row" = floor ] && continue
    start_row "$row" "$scratch/exact" exact
    load "$row#exact" "${metrics[@]}" --requests "$exact_calls" --warmup 0 --concurrency 64 --connections 4 \
      --keys "$exact_keys"
    stop "$server_pid"
    ok=$(field ok)
    echo "| $row | $ok | $(field over) | $(field failed) | $((ok - expected)) |"
  done
fi
echo
echo "limitador-bench: logs in $OUT"
