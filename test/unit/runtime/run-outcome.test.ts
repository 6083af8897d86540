import { describe, expect, it } from "vitest";
import { runOutcome } from "../../../src/runtime/runner.js";

describe("a source run's metric outcome", () => {
  it("separates the sandbox's failures from the component's errors", () => {
    expect(runOutcome(undefined)).toBe("ok");
    expect(runOutcome("TIMEOUT")).toBe("timeout");
    expect(runOutcome("SANDBOX_ERROR")).toBe("sandbox_error");
    expect(runOutcome("SANDBOX_CRASHED")).toBe("sandbox_error");
    for (const code of ["Error", "TypeError", "MEMORY_LIMIT", "INVALID_RESPONSE", "SANDBOX_CLOSED"])
      expect(runOutcome(code), code).toBe("error");
  });
});
