import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

/** The image's HEALTHCHECK is `tributary healthcheck` (SPEC §11: no curl in the image). */
const ROOT = path.resolve(import.meta.dirname, "../../..");
/** Instructions only (comments dropped), continuation lines joined. */
const dockerfile = readFileSync(path.join(ROOT, "Dockerfile"), "utf8")
  .split("\n")
  .filter((l) => !l.trimStart().startsWith("#"))
  .join("\n")
  .replace(/\\\n\s*/g, " ");
const bin = (JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as { bin: { tributary: string } }).bin.tributary;

describe("the Dockerfile", () => {
  it("checks health with the CLI's healthcheck command", () => {
    const line = dockerfile.split("\n").find((l) => l.startsWith("HEALTHCHECK"));
    expect(line).toBeDefined();
    expect(line).toMatch(/CMD \["tributary", "healthcheck"\]\s*$/);
    expect(dockerfile).not.toMatch(/\bcurl\b/);
  });

  it("puts `tributary` on PATH, linked to the compiled CLI", () => {
    expect(dockerfile).toContain(`ln -s /app/${bin} /usr/local/bin/tributary`);
  });
});
