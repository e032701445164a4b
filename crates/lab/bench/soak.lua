-- wrk script for soak.sh: every request carries an `x-api-key` from ten million values (the
-- key the soaked proxy limits by), thread t of n sending keys t, t + n, t + 2n, ... so the
-- threads never share a key and each key comes back only after ten million requests; every
-- response is counted by status class, and done() prints the totals.
--
--   wrk -t<n> ... -s soak.lua <url> -- <n>
local threads = {}

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  nthreads = tonumber(args[1]) or 1
  keys = 10000000
  n = 0
  ok, limited, server_error, other = 0, 0, 0, 0
end

function request()
  local key = (n * nthreads + id) % keys
  n = n + 1
  return wrk.format("GET", "/soak", { ["x-api-key"] = "k" .. key })
end

function response(status, headers, body)
  if status >= 200 and status < 300 then
    ok = ok + 1
  elseif status == 429 then
    limited = limited + 1
  elseif status >= 500 then
    server_error = server_error + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local t = { ok = 0, limited = 0, server_error = 0, other = 0, sent = 0 }
  for _, thread in ipairs(threads) do
    t.ok = t.ok + thread:get("ok")
    t.limited = t.limited + thread:get("limited")
    t.server_error = t.server_error + thread:get("server_error")
    t.other = t.other + thread:get("other")
    t.sent = t.sent + thread:get("n")
  end
  io.write(string.format("soak-counts 2xx=%d 429=%d 5xx=%d other=%d sent=%d\n",
    t.ok, t.limited, t.server_error, t.other, t.sent))
  local e = summary.errors
  io.write(string.format("soak-errors connect=%d read=%d write=%d status=%d timeout=%d\n",
    e.connect, e.read, e.write, e.status, e.timeout))
  io.write(string.format("soak-latency p50=%d p99=%d p999=%d max=%d\n",
    latency:percentile(50), latency:percentile(99), latency:percentile(99.9), latency.max))
end
