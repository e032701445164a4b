#!/usr/bin/env bash
# Load test of the example proxy under wrk (Debian package), against a fast upstream on
# loopback: requests/s and latency percentiles with no limiter, and with funnel's layer with
# the limit set high (every request allowed) and low (almost every request a 429).
#
#   bash crates/funnel-tower/bench/wrk.sh            # 5 s per row
#   SECONDS_PER_ROW=30 bash crates/funnel-tower/bench/wrk.sh
#
# tower_governor (0.8, over governor's keyed limiter) runs in the same proxy (`--governor`)
# with the same per-IP quota; it adds no rate-limit headers to its responses, funnel adds two.
set -euo pipefail
cd "$(dirname "$0")/../../.."
DUR="${SECONDS_PER_ROW:-5}"
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
trap 'kill $upstream_pid ${proxy_pid:-} 2>/dev/null || true' EXIT
sleep 0.3
printf '%-34s %12s %9s %9s %9s %8s\n' "row" "requests/s" "p50" "p99" "p99.9" "non-2xx"
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
  printf '%-34s %12s %9s %9s %9s %8s\n' "$name" "$rps" "$p50" "$p99" "$p999" "$non2xx"
}
row "no limiter" --no-limit
row "funnel, high limit (all allowed)" --limit "ip=100000000/1s" --limit "route=100000000/1s"
row "tower_governor, high limit" --governor --limit "ip=100000000/1s"
row "funnel, low limit (mostly 429)" --limit "ip=10/1s" --limit "route=100000000/1s"
row "tower_governor, low limit" --governor --limit "ip=10/1s"
