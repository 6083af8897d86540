import { script, type ScriptDef } from "../script.js";

/**
 * Filters one listener's attempt log inside Redis, so records (and their payloads) never travel
 * just to be discarded. Walks the index newest first within a score range (the time selectors),
 * reads each record only when a text selector is given, and keeps those whose JSON holds every
 * needle: `"status":"failed"`, `"event_name":"..."` with bare quotes. String values escape every
 * quote, so a needle only matches the record's top-level key (as CREATE_DELIVERY's trim relies on).
 *
 * The walk is bounded by ARGV[9] entries of the index (the log is trimmed to DELIVERY_LOG_LIMIT
 * plus its pending deliveries, so the bound is never reached in practice).
 *
 * Paging is by position relative to an anchor (a cursor's delivery id), compared by (score,
 * member) as ZREVRANGE orders them, so the anchor need not match the selectors itself:
 * `after` returns the first `limit` matches older than the anchor, `before` the `limit` matches
 * newest before it (closest to it), both newest first.
 *
 * KEYS[1] the index zset; ARGV[1] max score ("+inf" or "(<score>"), ARGV[2] min score ("-inf" or
 * "<score>"), ARGV[3] status needle or "", ARGV[4] event-name needle or "", ARGV[5] record key
 * prefix, ARGV[6] anchor delivery id or "", ARGV[7] "after" | "before" | "", ARGV[8] limit (0:
 * every match), ARGV[9] walk bound. Returns {total matches, ids...}, or {-1} when the anchor is
 * not in the index.
 */
export const QUERY_DELIVERIES: ScriptDef = script(
  "tribQueryDeliveries",
  1,
  `
local statusNeedle, eventNeedle, prefix = ARGV[3], ARGV[4], ARGV[5]
local anchor, direction, limit = ARGV[6], ARGV[7], tonumber(ARGV[8])
local anchorScore
if anchor ~= '' then
  anchorScore = redis.call('ZSCORE', KEYS[1], anchor)
  if not anchorScore then return {-1} end
  anchorScore = tonumber(anchorScore)
end
local entries = redis.call('ZREVRANGEBYSCORE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[9]))
local total, page = 0, {}
local filtering = statusNeedle ~= '' or eventNeedle ~= ''
for i = 1, #entries, 2 do
  local id, score = entries[i], tonumber(entries[i + 1])
  local ok = true
  if filtering then
    local raw = redis.call('GET', prefix .. id)
    ok = raw and (statusNeedle == '' or string.find(raw, statusNeedle, 1, true) ~= nil)
      and (eventNeedle == '' or string.find(raw, eventNeedle, 1, true) ~= nil)
  end
  if ok then
    total = total + 1
    local older = anchorScore and (score < anchorScore or (score == anchorScore and id < anchor))
    local newer = anchorScore and (score > anchorScore or (score == anchorScore and id > anchor))
    if direction == 'after' then
      if older and (limit == 0 or #page < limit) then page[#page + 1] = id end
    elseif direction == 'before' then
      if newer then
        page[#page + 1] = id
        if limit > 0 and #page > limit then table.remove(page, 1) end
      end
    elseif limit == 0 or #page < limit then
      page[#page + 1] = id
    end
  end
end
table.insert(page, 1, total)
return page
`,
);
