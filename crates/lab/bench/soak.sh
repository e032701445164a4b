#!/usr/bin/env bash
# Soak: funnel-tower's example proxy, in front of its example upstream on loopback, under wrk
# for a set time, keyed by an `x-api-key` header that churns through ten million values
# (soak.lua), with a probe key sent alongside at a known rhythm. Checks at the end, and fails loudly otherwise:
#
#   * the proxy's resident memory after the warm-up grew by at most 1 MiB (sampled every
#     5 s; the largest sample after the warm-up against the one at its end);
#   * no 5xx and no connection error (connect, read, write, timeout) in wrk's requests or the
#     probe's, and nothing on the proxy's stderr but its start line;
#   * every churning key was admitted (each one comes back only after ten million requests,
#     far past its 500 ms debt, so the model admits them all);
#   * the probe key was admitted exactly as the reference model says: every second it sends
#     three requests back to back; under the policy's quota (one per 500 ms, burst 1) the model,
#     run over the probe's own send times, admits the first and denies the other two. Each
#     decision is at least 100 ms from the model's boundary, so latency cannot change it, and
#     the script checks that margin too. A key that lost its debt (evicted, forgiven) or took
#     on another key's (a collision with the churn) would show as a mismatch.
#
#   bash crates/lab/bench/soak.sh                      # 10 minutes
#   SOAK_SECONDS=20 bash crates/lab/bench/soak.sh      # as CI runs it
#
#   SOAK_SECONDS     load duration (default 600)
#   WARMUP_SECONDS   memory baseline taken this long after the load starts (default: a third
#                    of SOAK_SECONDS, at most 60)
#   CONNECTIONS      wrk connections (default 32); WRK_THREADS wrk threads (default 1)
#   SOAK_OUT         directory for the logs and summary (default target/soak)
#
# wrk comes from Debian; the script installs it when missing (apt-get, as root or via sudo).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
SOAK_SECONDS="${SOAK_SECONDS:-600}"
WARMUP_SECONDS="${WARMUP_SECONDS:-$((SOAK_SECONDS / 3 < 60 ? SOAK_SECONDS / 3 : 60))}"
CONNS="${CONNECTIONS:-32}"
THREADS="${WRK_THREADS:-1}"
OUT="${SOAK_OUT:-target/soak}"
LIMIT='header:x-api-key=2/1s,burst=1'
INTERVAL_NS=500000000 # the quota's emission interval: 1 s / 2
MARGIN_NS=100000000
MAX_GROWTH_KB=1024

[ "$SOAK_SECONDS" -ge 10 ] || fail "SOAK_SECONDS must be at least 10"
[ "$WARMUP_SECONDS" -lt "$((SOAK_SECONDS - 5))" ] || fail "WARMUP_SECONDS must end 5 s before the load does"

need_wrk

cargo build --release -q -p funnel-tower --example proxy --example upstream
rm -rf "$OUT"; mkdir -p "$OUT"
logs=$OUT

start_listening upstream "$release/examples/upstream" 127.0.0.1:0; up=$addr
start_listening proxy "$release/examples/proxy" --listen 127.0.0.1:0 --upstream "http://$up" --limit "$LIMIT"
proxy=$addr proxy_pid=$started_pid
host=${proxy%:*} port=${proxy##*:}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$proxy_pid/status"; }

# The probe: three requests back to back at the start of every second, each on its own
# connection (bash's /dev/tcp), each line "<send time, ns> <status or 000>".
probe() {
  local start end_ns i=0 due now t line
  start=$(date +%s%N)
  end_ns=$((start + (SOAK_SECONDS - 2) * 1000000000))
  while :; do
    due=$((start + i * 1000000000))
    [ "$due" -lt "$end_ns" ] || break
    now=$(date +%s%N)
    [ "$due" -le "$now" ] || sleep "$(printf '%d.%09d' $(((due - now) / 1000000000)) $(((due - now) % 1000000000)))"
    for _ in 1 2 3; do
      t=$(date +%s%N)
      line="000"
      if exec 3<>"/dev/tcp/$host/$port"; then
        printf 'GET /probe HTTP/1.1\r\nhost: soak\r\nx-api-key: probe\r\nconnection: close\r\n\r\n' >&3
        IFS= read -r -t 10 line <&3 || line="000"
        exec 3<&-
        line=${line:9:3}
      fi
      echo "$t ${line:-000}"
    done
    i=$((i + 1))
  done
}

# Memory: a sample every 5 s, "<seconds since the load started> <VmRSS kB>".
sample() {
  local s=0
  while [ "$s" -le "$SOAK_SECONDS" ]; do
    echo "$s $(rss_kb)"
    sleep 5; s=$((s + 5))
  done
}

echo "soak: proxy $proxy (pid $proxy_pid) -> upstream $up, --limit \"$LIMIT\", ${SOAK_SECONDS}s," \
  "wrk -t$THREADS -c$CONNS, warm-up ${WARMUP_SECONDS}s"
echo "soak: resident memory at start: $(rss_kb) kB"
spawn probe >"$OUT/probe.txt"; probe_pid=$started_pid
spawn sample >"$OUT/rss.txt"; sample_pid=$started_pid
wrk -t"$THREADS" -c"$CONNS" -d"${SOAK_SECONDS}s" -s crates/lab/bench/soak.lua \
  "http://$proxy/" -- "$THREADS" >"$OUT/wrk.txt" 2>&1 || fail "wrk failed: $(cat "$OUT/wrk.txt")"
end_rss=$(rss_kb)
wait "$probe_pid" || true
kill "$sample_pid" 2>/dev/null || true
cat "$OUT/wrk.txt"

failures=()

# Memory after the warm-up.
read -r base_s base_kb < <(awk -v w="$WARMUP_SECONDS" '$1 >= w {print; exit}' "$OUT/rss.txt")
max_kb=$(awk -v w="$base_s" '$1 >= w && $1 < '"$SOAK_SECONDS"' {if ($2 > m) m = $2} END {print m}' "$OUT/rss.txt")
[ "$end_rss" -gt "$max_kb" ] && max_kb=$end_rss
growth=$((max_kb - base_kb))
echo "soak: resident memory: ${base_kb} kB at ${base_s}s (after the warm-up), at most ${max_kb} kB after it, ${end_rss} kB at the end: grew ${growth} kB (limit ${MAX_GROWTH_KB} kB)"
[ "$growth" -le "$MAX_GROWTH_KB" ] || failures+=("resident memory grew ${growth} kB after the warm-up")

# wrk's requests.
read -r ok limited server_error other sent < <(sed -n 's/^soak-counts 2xx=\([0-9]*\) 429=\([0-9]*\) 5xx=\([0-9]*\) other=\([0-9]*\) sent=\([0-9]*\)$/\1 \2 \3 \4 \5/p' "$OUT/wrk.txt")
read -r connect rd wr timeout < <(sed -n 's/^soak-errors connect=\([0-9]*\) read=\([0-9]*\) write=\([0-9]*\) status=[0-9]* timeout=\([0-9]*\)$/\1 \2 \3 \4/p' "$OUT/wrk.txt")
[ -n "${ok:-}" ] && [ -n "${connect:-}" ] || fail "no counts from soak.lua in $OUT/wrk.txt"
rps=$(awk '/^Requests\/sec/ {print $2}' "$OUT/wrk.txt")
echo "soak: wrk: ${ok} 2xx, ${limited} 429, ${server_error} 5xx, ${other} other; errors: connect ${connect}, read ${rd}, write ${wr}, timeout ${timeout}; ${rps} requests/s"
[ "$server_error" -eq 0 ] || failures+=("$server_error 5xx answers")
[ "$other" -eq 0 ] || failures+=("$other answers neither 2xx, 429 nor 5xx")
[ "$((connect + rd + wr + timeout))" -eq 0 ] || failures+=("connection errors: connect $connect, read $rd, write $wr, timeout $timeout")
[ "$limited" -eq 0 ] || failures+=("$limited churning keys denied (the model admits every one)")
[ "$ok" -gt 0 ] || failures+=("no request admitted")

# The probe against the reference model (GCRA, limit 1: a request at t is admitted when
# t >= tat, and then tat = t + interval).
read -r probes admitted mismatches close p5xx < <(awk -v T="$INTERVAL_NS" -v M="$MARGIN_NS" '
  { t = $1; s = $2
    allow = (n == 0 || t >= tat); d = t - tat; if (d < 0) d = -d
    if (n > 0 && d < M) close_calls++
    if (allow) { tat = t + T; a++ }
    if ((allow && s != "200") || (!allow && s != "429")) { bad++; if (bad <= 5) print "mismatch: " $0 " (model: " (allow ? "200" : "429") ")" > "/dev/stderr" }
    if (s >= 500 || s == "000") e++
    n++ }
  END { print n + 0, a + 0, bad + 0, close_calls + 0, e + 0 }' "$OUT/probe.txt")
echo "soak: probe: ${probes} requests, ${admitted} admitted by the model, ${mismatches} answers differ from it, ${close} within 100 ms of its boundary, ${p5xx} 5xx or no answer"
[ "$probes" -ge 3 ] || failures+=("the probe sent nothing")
[ "$mismatches" -eq 0 ] || failures+=("$mismatches probe answers differ from the model")
[ "$close" -eq 0 ] || failures+=("$close probe requests too close to the model's boundary to decide (the probe was delayed)")
[ "$p5xx" -eq 0 ] || failures+=("$p5xx probe requests got a 5xx or no answer")

# The proxy said nothing after its start line.
if [ "$(wc -l <"$OUT/proxy.log")" -gt 1 ]; then
  failures+=("the proxy logged: $(tail -n +2 "$OUT/proxy.log" | head -5)")
fi

cat >"$OUT/summary.md" <<MD
\`SOAK_SECONDS=$SOAK_SECONDS bash crates/lab/bench/soak.sh\` (wrk -t$THREADS -c$CONNS, warm-up ${WARMUP_SECONDS} s), $(nproc) CPUs ($(cpu_model)), $(date -u +%Y-%m-%d):

| figure | value |
|---|---|
| requests (wrk) | $sent sent, $ok 2xx, $limited 429, $server_error 5xx, $other other |
| requests/s | $rps |
| connection errors | connect $connect, read $rd, write $wr, timeout $timeout |
| resident memory | $base_kb kB after the warm-up, at most $max_kb kB after it ($growth kB growth; limit $MAX_GROWTH_KB kB) |
| probe | $probes requests, $admitted admitted, $mismatches differ from the model |
MD
if [ "${#failures[@]}" -gt 0 ]; then
  printf 'soak: FAIL: %s\n' "${failures[@]}" >&2
  exit 1
fi
echo "soak: PASS (summary in $OUT/summary.md)"
