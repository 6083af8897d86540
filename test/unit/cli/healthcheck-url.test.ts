import { describe, expect, it } from "vitest";
import { defaultHealthUrl } from "../../../src/cli/healthcheck.js";

describe("the healthcheck's default URL", () => {
  it("reaches a wildcard HOST through loopback", () => {
    expect(defaultHealthUrl("0.0.0.0", 3000)).toBe("http://127.0.0.1:3000");
    expect(defaultHealthUrl("::", 8080)).toBe("http://127.0.0.1:8080");
  });

  it("uses a specific HOST as it is, bracketing IPv6", () => {
    expect(defaultHealthUrl("10.1.2.3", 3000)).toBe("http://10.1.2.3:3000");
    expect(defaultHealthUrl("::1", 3000)).toBe("http://[::1]:3000");
    expect(defaultHealthUrl("localhost", 3000)).toBe("http://localhost:3000");
  });
});
