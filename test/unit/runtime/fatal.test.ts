import { Writable } from "node:stream";
import { pino } from "pino";
import { describe, expect, it } from "vitest";
import { logSandboxCrash } from "../../../src/runtime/fatal.js";

function capture() {
  const lines: string[] = [];
  const logger = pino(
    { level: "info" },
    new Writable({
      write(chunk, _enc, done) {
        lines.push(String(chunk));
        done();
      },
    }),
  );
  return { logger, logged: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>) };
}

describe("logSandboxCrash", () => {
  it("logs a catastrophic error at error level with isolated-vm's message and how the process ended", () => {
    const { logger, logged } = capture();
    logSandboxCrash(logger)({
      message: "Catastrophic out-of-memory error",
      code: null,
      signal: "SIGKILL",
      lost: 0,
      stderr: "x".repeat(5000),
    });
    const [line] = logged();
    expect(line).toMatchObject({ level: 50, message: "Catastrophic out-of-memory error", signal: "SIGKILL", lostRequests: 0 });
    expect(line?.msg).toMatch(/V8 lost control of an isolate in the sandbox process/);
    expect(String(line?.stderr)).toHaveLength(1024);
  });

  it("logs a crash without a catastrophic report as a V8 fatal error", () => {
    const { logger, logged } = capture();
    logSandboxCrash(logger)({ code: null, signal: "SIGTRAP", lost: 3, stderr: "# Fatal JavaScript invalid size error 150000001" });
    expect(logged()).toEqual([
      expect.objectContaining({ level: 50, signal: "SIGTRAP", lostRequests: 3, msg: expect.stringMatching(/a V8 fatal error/) }),
    ]);
  });
});
