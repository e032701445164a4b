# Sourced by the lab's shell drivers (server.sh, limitador.sh, proxies.sh, soak.sh, wrk.sh):
# what each of them starts, reads and stops, written once.
#
#   . "$(dirname "$0")/lib.sh"
#
# It moves to the workspace root and sets:
#   $release  cargo's release directory (CARGO_TARGET_DIR or target/release)
#   $work     a private temporary directory, removed on exit
#   $logs     where the start functions write their servers' output ($work; a driver that
#             keeps its logs points it elsewhere)
#   $pids     every process started through `spawn` or a start function: each is killed and
#             waited for on exit
# Everything listens on 127.0.0.1 only.

cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
release="${CARGO_TARGET_DIR:-target}/release"
work=$(mktemp -d "${TMPDIR:-/tmp}/funnel-lab.XXXXXX")
logs=$work
pids=()
driver=$(basename "$0" .sh)

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "$driver: FAIL: $*" >&2; exit 1; }

# Runs a command in the background (with the caller's redirections), stopped on exit; sets
# $started_pid.
spawn() {
  "$@" &
  started_pid=$!
  pids+=("$started_pid")
}

# `start_listening NAME COMMAND...`: a server that writes "<name>: listening on <addr> ..."
# on stderr once bound (port 0: the system picks a free port), its stderr in $logs/NAME.log.
# Sets $addr and $started_pid.
start_listening() {
  local name=$1; shift
  local log="$logs/$name.log"
  : >"$log" # emptied here, so no address of an earlier server of that name is read back
  spawn "$@" 2>>"$log"
  for _ in $(seq 200); do
    addr=$(awk '/listening on/ {print $4; exit}' "$log")
    [ -n "$addr" ] && return 0
    sleep 0.05
  done
  fail "$name did not start: $(cat "$log")"
}

# `start_service NAME COMMAND...`: a funnel-server (or the load generator's floor), which
# prints "... listening grpc=ADDR [http=ADDR]" on stdout once bound; its stdout and stderr in
# $logs/NAME.out and $logs/NAME.log. Sets $grpc, $http and $started_pid. It waits for the
# line $start_polls times 50 ms (default 200: 10 s).
start_service() {
  local name=$1; shift
  : >"$logs/$name.out"
  spawn "$@" >>"$logs/$name.out" 2>"$logs/$name.log"
  for _ in $(seq "${start_polls:-200}"); do
    grpc=$(sed -n 's/.*listening grpc=\([^ ]*\).*/\1/p' "$logs/$name.out")
    http=$(sed -n 's/.*listening .* http=\([^ ]*\).*/\1/p' "$logs/$name.out")
    [ -n "$grpc" ] && return 0
    sleep 0.05
  done
  fail "$name did not start: $(cat "$logs/$name.out" "$logs/$name.log")"
}

# A loopback port that answers no connection, for a program that cannot be given port 0.
# Another program may still take it before ours binds: callers check that they reached their
# own.
free_port() {
  local port
  for _ in $(seq 50); do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  fail "no free loopback port found"
}

# Waits until something listens on loopback port $1.
wait_port() {
  for _ in $(seq 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  fail "nothing listens on port $1"
}

# A private redis-server on a free loopback port, no persistence; sets $redis_port. It is
# checked to be ours (its process_id) once it answers PING; a port taken in between is
# retried.
start_redis() {
  command -v redis-server >/dev/null 2>&1 || fail "redis-server is required (apt-get install redis-server)"
  command -v redis-cli >/dev/null 2>&1 || fail "redis-cli is required (apt-get install redis-server)"
  local dir="$work/redis" try port pid
  mkdir -p "$dir"
  for try in 1 2 3; do
    port=$(free_port)
    spawn redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --dir "$dir" --logfile "$dir/redis-$try.log"
    pid=$started_pid
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
  fail "redis-server did not start: $(tail -n 5 "$dir"/redis-*.log 2>/dev/null)"
}

# The settings of a driver that runs its rows under wrk in rounds, from the environment:
# $ROUNDS (default 3), $DUR (SECONDS_PER_ROW, default 10), $CONNS (CONNECTIONS, default 32)
# and $THREADS (WRK_THREADS, default 1).
wrk_rounds() {
  ROUNDS="${ROUNDS:-3}"
  DUR="${SECONDS_PER_ROW:-10}"
  CONNS="${CONNECTIONS:-32}"
  THREADS="${WRK_THREADS:-1}"
}

# wrk, installed from Debian when missing (apt-get, as root or through sudo).
need_wrk() {
  if ! command -v wrk >/dev/null 2>&1; then
    local sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null ||
      true
  fi
  command -v wrk >/dev/null 2>&1 || fail "wrk is required and could not be installed (apt-get install wrk)"
}

# The figures of one wrk run with percentiles.lua, from its output in $1: sets $rps, $p50,
# $p99 and $p999 (µs), $total (requests) and $non2xx (answers).
wrk_figures() {
  rps=$(awk '/^Requests\/sec/ {print $2}' <<<"$1")
  p50=$(awk '$1=="percentile" && $2=="50" {print $3}' <<<"$1")
  p99=$(awk '$1=="percentile" && $2=="99" {print $3}' <<<"$1")
  p999=$(awk '$1=="percentile" && $2=="99.9" {print $3}' <<<"$1")
  total=$(awk '/requests in/ {print $1}' <<<"$1")
  non2xx=$(awk '/Non-2xx/ {print $5}' <<<"$1")
  non2xx=${non2xx:-0}
}

# The median of the numbers on stdin, one a line ("-" for none).
median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "-"; else print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

# The CPU model, for a figure's caption.
cpu_model() { awk -F': ' '/^model name/ {print $2; found=1; exit} END {if (!found) print "unknown CPU"}' /proc/cpuinfo 2>/dev/null; }
