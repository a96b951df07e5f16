-- wrk script for the throughput run: every request is the same valid order
-- with its own Idempotency-Key, "<prefix>-<thread>-<n>", so no request is a
-- replay. The prefix is the script's first argument (a fresh one per wrk
-- invocation). Responses are counted by status in each thread, and done()
-- prints one line for the Go side to parse: THROUGHPUT_RESULT {json}.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("thread_id", #threads)
end

local body = [[{"customer_id":"cus_123","currency":"USD","payment_method":"pm_card_visa","items":[{"sku":"SKU-1","quantity":2,"unit_price":1299},{"sku":"SKU-2","quantity":1,"unit_price":500}]}]]
local prefix
local n = 0

function init(args)
  prefix = args[1] or "throughput"
  status_201, status_2xx, status_other, first_other = 0, 0, 0, 0
end

function request()
  n = n + 1
  return wrk.format("POST", "/orders", {
    ["Content-Type"] = "application/json",
    ["Idempotency-Key"] = prefix .. "-" .. thread_id .. "-" .. n,
  }, body)
end

function response(status, headers, body)
  if status == 201 then
    status_201 = status_201 + 1
  elseif status >= 200 and status < 300 then
    status_2xx = status_2xx + 1
  else
    status_other = status_other + 1
    if first_other == 0 then first_other = status end
  end
end

function done(summary, latency, requests)
  local s201, s2xx, other, first = 0, 0, 0, 0
  for _, t in ipairs(threads) do
    s201 = s201 + t:get("status_201")
    s2xx = s2xx + t:get("status_2xx")
    other = other + t:get("status_other")
    if first == 0 then first = t:get("first_other") end
  end
  local e = summary.errors
  io.write(string.format(
    'THROUGHPUT_RESULT {"requests":%d,"duration_us":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%d,"p90":%d,"p99":%d,"max":%d},' ..
    '"status":{"created":%d,"other_2xx":%d,"not_2xx":%d,"first_not_2xx":%d}}\n',
    summary.requests, summary.duration,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    s201, s2xx, other, first))
end
