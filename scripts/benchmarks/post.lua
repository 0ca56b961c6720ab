-- The wrk script of the benchmark's http step (http_load.py):
--   wrk -s post.lua URL -- BODY_FILE ACCEPT MODE OFFSET
--
-- POST / with one query embedding. In "vary" mode four base64 characters that hold only the
-- lowest mantissa byte of four floats change per request: the ranking is the same work, but
-- every request misses the host's answer cache (keyed by the exact vector bytes). Each run
-- starts its counter at its own offset, so no run repeats another's vectors.
local counter = 0
local alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local threads = {}
local prefix, embedding, suffix, accept, mode

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  local file = io.open(args[1], "r")
  local body = file:read("*a")
  file:close()
  accept, mode = args[2], args[3]
  local offset = tonumber(args[4])
  local s, e = body:find('"query_embedding": "', 1, true)
  local close = body:find('"', e + 1, true)
  prefix, embedding, suffix = body:sub(1, e), body:sub(e + 1, close - 1), body:sub(close)
  counter = offset + id * 1000000
end

local function char(n) return alphabet:sub(n % 64 + 1, n % 64 + 1) end

function request()
  local vector = embedding
  if mode == "vary" then
    counter = counter + 1
    local n = counter
    vector = embedding:sub(1, 16) .. char(n) .. embedding:sub(18, 32) .. char(math.floor(n / 64))
          .. embedding:sub(34, 48) .. char(math.floor(n / 4096)) .. embedding:sub(50, 64)
          .. char(math.floor(n / 262144)) .. embedding:sub(66)
  end
  return wrk.format("POST", "/", {["Content-Type"] = "application/json", ["Accept"] = accept},
                    prefix .. vector .. suffix)
end

function done(summary, latency, requests)
  io.write(string.format('WRK_RESULT {"requests": %d, "duration_us": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, ' ..
    '"max_us": %d, "mean_us": %f, "status_errors": %d, "socket_errors": %d, "timeouts": %d, "bytes": %d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean, summary.errors.status,
    summary.errors.connect + summary.errors.read + summary.errors.write, summary.errors.timeout, summary.bytes))
end
