import { existsSync, readdirSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, expect, it } from "vitest";

/**
 * Tests are a map of src/: every folder of src/ has a test folder of the same path under
 * test/unit/ or test/integration/ holding at least one test file. (Cross-layer suites such as
 * test/integration/durability/ are extra folders; test/helpers/ is the shared harness.) The
 * deployment kit, deploy/, is tested under test/unit/deploy/ or test/integration/deploy/.
 */
const ROOT = join(import.meta.dirname, "../../..");
const SRC = join(ROOT, "src");

function folders(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .flatMap((e) => {
      const path = join(dir, e.name);
      return [path, ...folders(path)];
    });
}

const hasTests = (dir: string) => existsSync(dir) && readdirSync(dir).some((f) => f.endsWith(".test.ts"));

/** The src/ folders (relative) without a test folder of their own. */
function untested(srcFolders: readonly string[]): string[] {
  return srcFolders
    .map((f) => relative(SRC, f))
    .filter((rel) => !hasTests(join(ROOT, "test", "unit", rel)) && !hasTests(join(ROOT, "test", "integration", rel)));
}

describe("the test map", () => {
  it("gives every src/ folder a test folder", () => {
    const all = folders(SRC);
    expect(all.length).toBeGreaterThan(10);
    expect(untested(all)).toEqual([]);
  });

  it("gives deploy/ a test folder", () => {
    const deployTests = ["unit", "integration"].map((kind) => join(ROOT, "test", kind, "deploy"));
    expect(existsSync(join(ROOT, "deploy"))).toBe(true);
    expect(deployTests.some(hasTests)).toBe(true);
  });

  it("names a folder that has none", () => {
    expect(untested([join(SRC, "no-such-folder")])).toEqual(["no-such-folder"]);
  });
});
