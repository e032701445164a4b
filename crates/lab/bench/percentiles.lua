-- wrk script for wrk.sh: after a run, print the latency percentiles in microseconds
-- (wrk's own --latency table stops at 99%).
done = function(summary, latency, requests)
  for _, p in ipairs({ 50, 90, 99, 99.9 }) do
    io.write(string.format("percentile %g %d\n", p, latency:percentile(p)))
  end
end
