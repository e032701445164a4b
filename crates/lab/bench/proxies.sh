#!/usr/bin/env bash
# What the forward-auth hop costs nginx and Caddy, under wrk: requests/s and latency
# percentiles of each proxy in front of a fast upstream on loopback, with no limit, with
# nginx's own `limit_req`, and with funnel-server's forward-auth endpoint (the configurations of
# crates/funnel-server/deploy/, only their addresses changed), the limit set high so that every
# request is allowed: the rows differ only by the limit's hop.
#
#   bash crates/lab/bench/proxies.sh
#   ROUNDS=1 SECONDS_PER_ROW=3 bash crates/lab/bench/proxies.sh   # a quick look
#
# Each round runs every row once, in a rotated order; the summary prints each row's median over
# the rounds as a Markdown table. nginx runs one worker; wrk, the proxy, funnel-server and the
# upstream share the machine's CPUs. Needs nginx, caddy and wrk (apt-get install nginx caddy
# wrk). Everything listens on 127.0.0.1; everything started is stopped on exit.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
wrk_rounds
for tool in nginx caddy wrk; do
  command -v "$tool" >/dev/null 2>&1 || fail "$tool is required (apt-get install nginx caddy wrk)"
done
cargo build --release -q -p funnel-server --bin funnel-server -p funnel-tower --example upstream
deploy=crates/funnel-server/deploy
lua=crates/lab/bench/percentiles.lua

start_listening upstream "$release/examples/upstream" 127.0.0.1:0; up=$addr

# funnel-server: the deploy files, the limit raised so that every request is allowed.
mkdir -p "$work/rules"
sed 's/requests_per_unit: 5/requests_per_unit: 100000000/; s/unit: minute/unit: second/' \
  "$deploy/rules/web.yaml" >"$work/rules/web.yaml"
start_service funnel "$release/funnel-server" --config "$work/rules" --forward-auth "$deploy/forward-auth.yaml" \
  --grpc 127.0.0.1:0 --http 127.0.0.1:0 --no-watch
funnel=$http

user=""; [ "$(id -u)" = 0 ] && user="user root;"
# nginx with one server block (the file $1), in the foreground, its files in $work/nginx-$2.
start_nginx() {
  local dir="$work/nginx-$2"; mkdir -p "$dir"
  cp "$1" "$dir/site.conf"
  cat >"$dir/nginx.conf" <<CONF
$user
daemon off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir/body; proxy_temp_path $dir/proxy;
  fastcgi_temp_path $dir/fastcgi; uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;
  limit_req_zone \$binary_remote_addr zone=per_ip:10m rate=10000000r/s;
  include $dir/site.conf;
}
CONF
  spawn nginx -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log"; proxy_pid=$started_pid
}
start_caddy() {
  mkdir -p "$work/caddy-$2"
  cp "$1" "$work/caddy-$2/Caddyfile"
  spawn env HOME="$work/caddy-$2" XDG_DATA_HOME="$work/caddy-$2" XDG_CONFIG_HOME="$work/caddy-$2" \
    caddy run --adapter caddyfile --config "$work/caddy-$2/Caddyfile" 2>"$work/caddy-$2/log"
  proxy_pid=$started_pid
}

port=$(free_port)
addrs="s/127.0.0.1:8000/127.0.0.1:$port/; s/:8001/:$port/; s/127.0.0.1:8080/$funnel/; s/127.0.0.1:3000/$up/"
sed "$addrs" "$deploy/nginx/funnel.conf" >"$work/nginx-forward-auth.conf"
sed "$addrs" "$deploy/caddy/Caddyfile" >"$work/caddy-forward-auth"
cat >"$work/nginx-plain.conf" <<CONF
upstream app { server $up; keepalive 16; }
server {
  listen 127.0.0.1:$port;
  location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; }
}
CONF
cat >"$work/nginx-limit-req.conf" <<CONF
upstream app { server $up; keepalive 16; }
server {
  listen 127.0.0.1:$port;
  location / {
    limit_req zone=per_ip burst=1000000 nodelay;
    limit_req_status 429;
    proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection "";
  }
}
CONF
printf '{\n\tadmin off\n\tauto_https off\n}\n\nhttp://:%s {\n\tbind 127.0.0.1\n\treverse_proxy %s\n}\n' "$port" "$up" >"$work/caddy-plain"

row() {
  local name="$1" kind="$2" file="$3"
  "start_$kind" "$file" "$RANDOM"
  wait_port "$port"
  local out; out=$(wrk -t"$THREADS" -c"$CONNS" -d"${DUR}s" -s "$lua" "http://127.0.0.1:$port/")
  kill "$proxy_pid"; wait "$proxy_pid" 2>/dev/null || true
  # The port free again before the next row binds it.
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || break; sleep 0.05; done
  local rps p50 p99 p999 total non2xx
  wrk_figures "$out"
  printf '%-32s %11s %9s %9s %8s/%s\n' "$name" "$rps" "$p50" "$p99" "$non2xx" "$total"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rps" "$p50" "$p99" >>"$work/results"
}

names=("nginx, no limit" "nginx, limit_req" "nginx, forward-auth" "Caddy, no limit" "Caddy, forward-auth")
kinds=(nginx nginx nginx caddy caddy)
files=("$work/nginx-plain.conf" "$work/nginx-limit-req.conf" "$work/nginx-forward-auth.conf" "$work/caddy-plain" "$work/caddy-forward-auth")
n=${#names[@]}
for ((r = 0; r < ROUNDS; r++)); do
  printf '\nround %d of %d\n' $((r + 1)) "$ROUNDS"
  printf '%-32s %11s %9s %9s %8s\n' "row" "requests/s" "p50 us" "p99 us" "non-2xx"
  for ((i = 0; i < n; i++)); do
    j=$(( (i + r) % n ))
    row "${names[$j]}" "${kinds[$j]}" "${files[$j]}"
  done
done

col() { awk -F'\t' -v n="$1" -v c="$2" '$1==n {print $c}' "$work/results" | median; }
printf '\n`ROUNDS=%s SECONDS_PER_ROW=%s CONNECTIONS=%s WRK_THREADS=%s bash crates/lab/bench/proxies.sh`  \n' "$ROUNDS" "$DUR" "$CONNS" "$THREADS"
printf 'wrk -t%s -c%s -d%ss, one client address, medians over %s rounds; nginx %s (1 worker), Caddy %s; %s; %s CPUs shared by wrk, the proxy, funnel-server and the upstream; %s\n\n' \
  "$THREADS" "$CONNS" "$DUR" "$ROUNDS" "$(nginx -v 2>&1 | sed 's/.*nginx\///')" "$(caddy version | cut -d' ' -f1)" \
  "$(cpu_model)" "$(nproc)" "$(date -u +%Y-%m-%d)"
printf '| row | requests/s | p50 (µs) | p99 (µs) | p50 added (µs) | p99 added (µs) |\n|---|--:|--:|--:|--:|--:|\n'
for name in "${names[@]}"; do
  base="nginx, no limit"; [[ $name == Caddy* ]] && base="Caddy, no limit"
  diff() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.0f", a - b }'; }
  printf '| %s | %.0f | %s | %s | %s | %s |\n' "$name" "$(col "$name" 2)" "$(col "$name" 3)" "$(col "$name" 4)" \
    "$(diff "$(col "$name" 3)" "$(col "$base" 3)")" "$(diff "$(col "$name" 4)" "$(col "$base" 4)")"
done
