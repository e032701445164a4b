#!/usr/bin/env bash
# Load test of the example proxy under wrk (Debian package), against a fast upstream on
# loopback: requests/s and latency percentiles with no limiter, and with funnel's layer with
# the limit set high (every request allowed) and low (almost every request a 429).
#
#   bash crates/funnel-tower/bench/wrk.sh                       # 3 rounds of 5 s per row
#   ROUNDS=5 SECONDS_PER_ROW=10 bash crates/funnel-tower/bench/wrk.sh
#
# Each round runs every row once, in a rotated order (so no row always follows the same one),
# and the summary gives each row's median over the rounds: on a machine shared by wrk, the
# proxy and the upstream, single rows vary by about 10%.
#
# tower_governor (0.8, over governor's keyed limiter) runs in the same proxy (`--governor`)
# with the same per-IP quota; it adds no rate-limit headers to its responses, funnel adds two.
set -euo pipefail
cd "$(dirname "$0")/../../.."
DUR="${SECONDS_PER_ROW:-5}"
ROUNDS="${ROUNDS:-3}"
CONNS="${CONNECTIONS:-32}"
if ! command -v wrk >/dev/null 2>&1; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi
command -v wrk >/dev/null 2>&1 || { echo "wrk is required and could not be installed" >&2; exit 1; }
cargo build --release -q -p funnel-tower --example proxy --example upstream
bin=target/release/examples
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
up=$(free_port)
"$bin/upstream" "127.0.0.1:$up" & upstream_pid=$!
sleep 0.3
results=$(mktemp)
trap 'kill $upstream_pid ${proxy_pid:-} 2>/dev/null || true; rm -f "$results"' EXIT
row() {
  local name="$1"; shift
  local port; port=$(free_port)
  "$bin/proxy" --listen "127.0.0.1:$port" --upstream "http://127.0.0.1:$up" "$@" 2>/dev/null & proxy_pid=$!
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
  local out; out=$(wrk -t1 -c"$CONNS" -d"${DUR}s" --latency "http://127.0.0.1:$port/")
  kill "$proxy_pid"; wait "$proxy_pid" 2>/dev/null || true; proxy_pid=""
  local rps p50 p99 p999 non2xx
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$out")
  p50=$(awk '$1=="50%" {print $2}' <<<"$out")
  p99=$(awk '$1=="99%" {print $2}' <<<"$out")
  p999=$(awk '$1=="99.900%" || $1=="99.9%" {print $2}' <<<"$out"); p999=${p999:--}
  non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$out"); non2xx=${non2xx:-0}
  printf '%-40s %12s %9s %9s %9s %8s\n' "$name" "$rps" "$p50" "$p99" "$p999" "$non2xx"
  printf '%s\t%s\n' "$name" "$rps" >>"$results"
}
names=(
  "no limiter"
  "funnel, per-IP limit high (all allowed)"
  "tower_governor, per-IP limit high"
  "funnel, per-IP + per-route high"
  "funnel, per-IP limit low (mostly 429)"
  "tower_governor, per-IP limit low"
)
args=(
  "--no-limit"
  "--limit ip=100000000/1s"
  "--governor --limit ip=100000000/1s"
  "--limit ip=100000000/1s --limit route=100000000/1s"
  "--limit ip=10/1s"
  "--governor --limit ip=10/1s"
)
n=${#names[@]}
for ((r = 0; r < ROUNDS; r++)); do
  printf '\nround %d of %d\n' $((r + 1)) "$ROUNDS"
  printf '%-40s %12s %9s %9s %9s %8s\n' "row" "requests/s" "p50" "p99" "p99.9" "non-2xx"
  for ((i = 0; i < n; i++)); do
    j=$(( (i + r) % n ))
    # shellcheck disable=SC2086 # the flags are meant to split
    row "${names[$j]}" ${args[$j]}
  done
done
printf '\nmedian requests/s over %d rounds\n' "$ROUNDS"
for name in "${names[@]}"; do
  median=$(awk -F'\t' -v n="$name" '$1==n {print $2}' "$results" | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}')
  printf '%-40s %12s\n' "$name" "$median"
done
