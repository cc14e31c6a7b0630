-- wrk: durable appends of one event, spread over 16 conversations
-- (wrk -c16: 16 connections, each request to the next conversation).
local counter = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/x-ndjson"
wrk.body = '{"type":"user","text":"message: a line of the conversation"}\n'
request = function()
  counter = counter + 1
  return wrk.format(nil, "/v1/conversations/wrk-" .. (counter % 16) .. "/events")
end
