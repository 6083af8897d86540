import { describe, expect, it } from "vitest";
import { eventFrame, eventFrameLength, HEARTBEAT_FRAME, streamsToShed } from "../../../src/domain/server-sent-events.js";

describe("server-sent event frames", () => {
  it("writes an id line and one data line, then a blank line, with no event field", () => {
    const json = JSON.stringify({ id: "1-0", event: { text: "line one\nline two\r\n" } });
    const frame = eventFrame("1-0", json);
    expect(frame.endsWith("\n\n")).toBe(true);
    const lines = frame.slice(0, -2).split("\n");
    expect(lines).toEqual(["id: 1-0", `data: ${json}`]);
    expect(JSON.parse(lines[1]?.slice(6) as string)).toEqual({ id: "1-0", event: { text: "line one\nline two\r\n" } });
  });

  it("sends the heartbeat as a comment, which clients ignore", () => {
    expect(HEARTBEAT_FRAME).toBe(":sse-handshake\n\n");
  });
});

describe("live-tail byte budget", () => {
  it("counts a queued event as the length of its frame", () => {
    for (const [id, json] of [
      ["1-0", "{}"],
      ["1717171717171-42", JSON.stringify({ text: "wörld".repeat(100) })],
    ] as const) {
      expect(eventFrameLength(id, json)).toBe(eventFrame(id, json).length);
    }
  });

  it("sheds the largest streams first, as few as bring the rest within the budget", () => {
    const held = [
      { stream: "a", bytes: 100 },
      { stream: "b", bytes: 900 },
      { stream: "c", bytes: 300 },
      { stream: "d", bytes: 300 },
    ];
    expect(streamsToShed(held, 2000)).toEqual([]);
    expect(streamsToShed(held, 1600)).toEqual([]);
    expect(streamsToShed(held, 1500)).toEqual(["b"]);
    // Equal sizes go oldest (first listed) first.
    expect(streamsToShed(held, 500)).toEqual(["b", "c"]);
    expect(streamsToShed(held, 0)).toEqual(["b", "c", "d", "a"]);
  });

  it("never sheds a stream that holds nothing", () => {
    expect(streamsToShed([{ stream: "idle", bytes: 0 }], 0)).toEqual([]);
    expect(streamsToShed([], 10)).toEqual([]);
  });
});
