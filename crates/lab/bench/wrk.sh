#!/usr/bin/env bash
# Load test of the lab's proxy (examples/loadtest_proxy.rs: funnel-tower's example proxy plus a
# no-limit baseline and tower_governor modes) under wrk (Debian package), against a fast upstream on
# loopback: requests/s and latency percentiles with no limiter, with funnel's layer and with
# tower_governor in the same proxy, the limit set high (every request allowed) and low (almost
# every request a 429).
#
#   bash crates/lab/bench/wrk.sh                          # 3 rounds of 10 s per row
#   ROUNDS=5 SECONDS_PER_ROW=10 bash crates/lab/bench/wrk.sh
#   ROUNDS=1 SECONDS_PER_ROW=2 bash crates/lab/bench/wrk.sh   # a quick look
#
# Each round runs every row once, in a rotated order (so no row always follows the same one);
# the summary gives each row's median and best round over the rounds (a shared host slows whole
# rounds, so the best round is each row's least disturbed one), and prints a Markdown table with
# the command and the machine, ready for BENCHMARKS.md. On a machine shared by wrk, the proxy and
# the upstream, single rows vary by about 10%: run it on an otherwise idle machine.
#
# The comparison rows give both limiters one per-IP policy with the same quota (burst = count,
# one unit back every period/count). funnel writes its two RateLimit headers on every
# response; tower_governor, in its default mode, writes none on allowed requests (its 429s
# carry x-ratelimit-after and retry-after); the "+ headers" rows turn on its `use_headers`
# mode, x-ratelimit-limit/remaining on every response: the like-for-like comparison. The
# two-policy funnel row (per IP + per route) is
# there to show what a second policy costs; it is not compared with tower_governor, which has
# one quota per layer.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
wrk_rounds
need_wrk
cargo build --release -q -p funnel-lab --example loadtest_proxy -p funnel-tower --example upstream
bin="$release/examples"
lua=crates/lab/bench/percentiles.lua

start_listening upstream "$bin/upstream" 127.0.0.1:0; up=$addr

row() {
  local name="$1"; shift
  start_listening proxy "$bin/loadtest_proxy" --listen 127.0.0.1:0 --upstream "http://$up" "$@"
  local proxy_pid=$started_pid
  local out; out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DUR}s" -s "$lua" "http://$addr/")
  kill "$proxy_pid"; wait "$proxy_pid" 2>/dev/null || true
  local rps p50 p99 p999 total non2xx
  wrk_figures "$out"
  local share; share=$(awk -v n="$non2xx" -v t="$total" 'BEGIN { printf "%.1f", t ? 100 * n / t : 0 }')
  printf '%-44s %11s %9s %9s %9s %7s%%\n' "$name" "$rps" "$p50" "$p99" "$p999" "$share"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$rps" "$p50" "$p99" "$p999" "$share" >>"$work/results"
}

names=(
  "no limiter"
  "funnel, 1 policy (per IP), limit high"
  "tower_governor, per IP, limit high"
  "funnel, 1 policy (per IP), limit low"
  "tower_governor, per IP, limit low"
  "funnel, 2 policies (per IP + route), high"
  "tower_governor + headers, per IP, limit high"
  "tower_governor + headers, per IP, limit low"
)
args=(
  "--no-limit"
  "--limit ip=100000000/1s"
  "--governor --limit ip=100000000/1s"
  "--limit ip=10/1s"
  "--governor --limit ip=10/1s"
  "--limit ip=100000000/1s --limit route=100000000/1s"
  "--governor-headers --limit ip=100000000/1s"
  "--governor-headers --limit ip=10/1s"
)
n=${#names[@]}
for ((r = 0; r < ROUNDS; r++)); do
  printf '\nround %d of %d\n' $((r + 1)) "$ROUNDS"
  printf '%-44s %11s %9s %9s %9s %8s\n' "row" "requests/s" "p50 us" "p99 us" "p99.9 us" "non-2xx"
  for ((i = 0; i < n; i++)); do
    j=$(( (i + r) % n ))
    # shellcheck disable=SC2086 # the flags are meant to split
    row "${names[$j]}" ${args[$j]}
  done
done

best() { sort -g | tail -1; }
col() { awk -F'\t' -v n="$1" -v c="$2" '$1==n {print $c}' "$work/results" | median; }
top() { awk -F'\t' -v n="$1" '$1==n {print $2}' "$work/results" | best; }
declare -A rps
declare -A max
printf '\n### Medians over %d rounds\n\n' "$ROUNDS"
printf '`ROUNDS=%s SECONDS_PER_ROW=%s CONNECTIONS=%s WRK_THREADS=%s bash crates/lab/bench/wrk.sh`  \n' "$ROUNDS" "$DUR" "$CONNS" "$THREADS"
printf 'wrk -t%s -c%s -d%ss (percentiles from bench/percentiles.lua), one client address; %s; %s CPUs (wrk, proxy and upstream share them); %s\n\n' \
  "$THREADS" "$CONNS" "$DUR" "$(cpu_model)" "$(nproc)" "$(date -u +%Y-%m-%d)"
printf '| row | requests/s, median | best round | p50 (µs) | p99 (µs) | p99.9 (µs) | non-2xx |\n|---|---|---|---|---|---|---|\n'
for name in "${names[@]}"; do
  rps[$name]=$(col "$name" 2)
  max[$name]=$(top "$name")
  printf '| %s | %.0f | %.0f | %s | %s | %s | %s%% |\n' "$name" "${rps[$name]}" "${max[$name]}" "$(col "$name" 3)" "$(col "$name" 4)" "$(col "$name" 5)" "$(col "$name" 6)"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b ? a / b : 0 }'; }
# Each ratio on the medians, then on the best rounds (a shared host slows whole rounds: the
# best round of each row is its least disturbed one).
both() { printf '%s (best rounds: %s)' "$(ratio "${rps[$1]}" "${rps[$2]}")" "$(ratio "${max[$1]}" "${max[$2]}")"; }
printf '\n* funnel (1 policy, all allowed) ÷ no limiter: %s (the target: ≥ 0.97)\n' "$(both "${names[1]}" "${names[0]}")"
printf '* funnel 429s ÷ funnel 200s (limit low ÷ limit high): %s (the target: ≥ 1)\n' "$(both "${names[3]}" "${names[1]}")"
printf '* funnel ÷ tower_governor, limit high: %s; limit low: %s (the target: ≥ 1 in both)\n' \
  "$(both "${names[1]}" "${names[2]}")" "$(both "${names[3]}" "${names[4]}")"
printf '* funnel ÷ tower_governor writing its headers too (like for like), limit high: %s; limit low: %s\n' \
  "$(both "${names[1]}" "${names[6]}")" "$(both "${names[3]}" "${names[7]}")"
printf '* funnel, 2 policies ÷ 1 policy, all allowed: %s\n' "$(both "${names[5]}" "${names[1]}")"
