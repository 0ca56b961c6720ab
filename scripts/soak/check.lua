-- The soak's answer check for wrk (scripts/soak.py runs it when wrk is installed):
--   wrk -s check.lua URL -- SETTINGS_FILE
-- SETTINGS_FILE is Lua written by soak.py (`return {requests = ..., private = ..., kinds = ...,
-- failures = ...}`): the requests to cycle through, the private library, what the number of bits
-- in an answer says about its request, and where to write the first wrong answers.
-- The check is soak.py's check_answer, for wrk: the two must agree (and so must bits_in and sim
-- below with soak.py's bits_in_version and similarity).
-- The JIT is off: LuaJIT 2.1.0-beta3 (Debian's wrk) sometimes miscompiles this check after many
-- thousand calls and reports right answers as wrong (seen about 1 in 50,000; never with -joff).
if jit then jit.off() end
local REQUESTS, PRIVATE, KINDS, FAILURES
local prepared = {}
counter = 0
checked = 0
wrong = 0
not_ok = 0
noted = 0

local threads = {}
function setup(thread)
  thread:set("id", #threads + 1)
  table.insert(threads, thread)
end

function init(args)
  local settings = dofile(args[1])
  REQUESTS, PRIVATE, KINDS, FAILURES = settings.requests, settings.private, settings.kinds, settings.failures
  for _, r in ipairs(REQUESTS) do
    table.insert(prepared, wrk.format("POST", "/", r.headers, r.body))
  end
  counter = id or 0
end

function request()
  counter = counter + 1
  return prepared[(counter % #prepared) + 1]
end

local function bits_in(v) return 12 + v % 5 end
local function sim(l, v, i) return 0.9 - 0.02 * i - 0.002 * l - 0.0001 * (v % 10) end

local function check(body)
  local bits = {}
  for l, v, i, t, tokens, s, url in string.gmatch(body,
      '"text":"soak L=(%d+) V=(%d+) i=(%d+) T=(%a+)[^"]*","token_count":(%d+),"similarity":([^,}]+),"info":{"url":"([^"]*)"') do
    table.insert(bits, {l = tonumber(l), v = tonumber(v), i = tonumber(i), t = t, tokens = tonumber(tokens),
                        s = tonumber(s), url = url})
  end
  local counted = tonumber(string.match(body, '"counts":{"bits":(%d+)'))
  if counted ~= #bits then return "counts.bits " .. tostring(counted) .. " but " .. #bits .. " bits parsed" end
  local kind = KINDS[#bits]
  if not kind then return "unexpected number of bits " .. #bits end
  local private, count_type, count = kind[1], kind[2], kind[3]
  local sign = 1
  if bits[1].s < 0 then sign = -1 end
  local version_of = {}
  local total = 0
  for k, b in ipairs(bits) do
    if math.abs(b.s - sign * sim(b.l, b.v, b.i)) > 2e-5 then return "similarity of another bit at " .. k end
    if k > 1 and not (b.s < bits[k - 1].s) then return "not descending at " .. k end
    if version_of[b.l] and version_of[b.l] ~= b.v then return "library " .. b.l .. " mixes versions" end
    version_of[b.l] = b.v
    if (b.t == "priv") ~= (b.l == PRIVATE) then return "access tag of the wrong library" end
    if b.t == "priv" and not private then return "a private bit reached an anonymous caller" end
    if b.url ~= ("https://soak.example/" .. b.l .. "/" .. b.v .. "/" .. b.i) then return "info of another bit" end
    total = total + b.tokens
  end
  if sign > 0 and not version_of[0] then return "library 0 is missing" end
  if sign > 0 and private and not version_of[PRIVATE] then return "the token holder did not get the private library" end
  local expected = {}
  for l, v in pairs(version_of) do
    for i = 0, bits_in(v) - 1 do table.insert(expected, {l = l, i = i}) end
  end
  table.sort(expected, function(a, b) return sign * (10 * a.i + a.l) < sign * (10 * b.i + b.l) end)
  for k, b in ipairs(bits) do
    if expected[k].l ~= b.l or expected[k].i ~= b.i then return "not the top of the ranking at " .. k end
  end
  if count_type == "token" and total > count then return "over the token budget" end
  return nil
end

local function note(problem, body)
  if noted < 5 then
    noted = noted + 1
    local file = io.open(FAILURES, "a")
    file:write(problem .. "\n" .. body .. "\n\n")
    file:close()
  end
end

function response(status, headers, body)
  checked = checked + 1
  if status ~= 200 then
    not_ok = not_ok + 1
    note("status " .. status, body)
    return
  end
  local problem = check(body)
  if problem then
    wrong = wrong + 1
    note(problem, body)
  end
end

function done(summary, latency, requests)
  local checked_all, wrong_all, not_ok_all = 0, 0, 0
  for _, thread in ipairs(threads) do
    checked_all = checked_all + thread:get("checked")
    wrong_all = wrong_all + thread:get("wrong")
    not_ok_all = not_ok_all + thread:get("not_ok")
  end
  local e = summary.errors
  io.write(string.format("SOAK {\"requests\": %d, \"checked\": %d, \"wrong\": %d, \"not_200\": %d, " ..
    "\"connect\": %d, \"read\": %d, \"write\": %d, \"status\": %d, \"timeout\": %d, \"duration_us\": %d, " ..
    "\"p50_us\": %d, \"p90_us\": %d, \"p99_us\": %d, \"max_us\": %d}\n",
    summary.requests, checked_all, wrong_all, not_ok_all, e.connect, e.read, e.write, e.status, e.timeout,
    summary.duration, latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
