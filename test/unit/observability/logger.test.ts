import { describe, expect, it } from "vitest";
import { createLogger, prettyPrinterInstalled } from "../../../src/observability/logger.js";

/** LOG_FORMAT=pretty: pino-pretty when installed, else JSON and one note saying what to install. */
function stderrOf(fn: () => void): string {
  const write = process.stderr.write;
  let text = "";
  process.stderr.write = ((chunk: string | Uint8Array) => {
    text += String(chunk);
    return true;
  }) as typeof process.stderr.write;
  try {
    fn();
  } finally {
    process.stderr.write = write;
  }
  return text;
}

describe("createLogger", () => {
  it("writes JSON by default, without a note", () => {
    expect(stderrOf(() => createLogger("silent"))).toBe("");
  });

  it("uses pino-pretty for LOG_FORMAT=pretty when installed, else says which package is missing", () => {
    const note = stderrOf(() => createLogger("silent", {}, "pretty"));
    if (prettyPrinterInstalled()) expect(note).toBe("");
    else expect(note).toBe("tributary: LOG_FORMAT=pretty needs the pino-pretty package (npm install pino-pretty); logging JSON\n");
  });
});
