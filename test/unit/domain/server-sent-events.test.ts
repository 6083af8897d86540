import { describe, expect, it } from "vitest";
import { eventFrame, HEARTBEAT_FRAME } from "../../../src/domain/server-sent-events.js";

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
