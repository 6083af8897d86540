import { describe, expect, it } from "vitest";
import { ValidationError } from "../../../../src/domain/errors.js";
import { compileComponent } from "../../../../src/runtime/component/compile.js";
import { packageName } from "../../../../src/runtime/component/resolve-plugin.js";

const opts = { allowedPackages: ["@pipedream/platform", "ms"] };

async function compileError(code: string, allowedPackages: readonly string[] = opts.allowedPackages): Promise<ValidationError> {
  try {
    await compileComponent(code, { allowedPackages });
  } catch (err) {
    expect(err).toBeInstanceOf(ValidationError);
    return err as ValidationError;
  }
  throw new Error("expected a ValidationError");
}

describe("compileComponent", () => {
  it("passes CommonJS through as a CommonJS script", async () => {
    const out = await compileComponent(`module.exports = { name: "a", async run() {} };`, opts);
    expect(out).toContain("module.exports");
    expect(out).toContain(`name: "a"`);
  });

  it("turns export default into a CommonJS module", async () => {
    const out = await compileComponent(`export default { name: "b", async run() {} };`, opts);
    expect(out).toContain("module.exports");
    expect(out).not.toMatch(/^export /m);
  });

  it("bundles an allowed package into the script", async () => {
    const out = await compileComponent(`import ms from "ms"; export default { name: "c", x: ms("1h"), async run() {} };`, opts);
    expect(out).not.toMatch(/require\("ms"\)/);
    expect(out).toContain("node_modules/ms");
  });

  it("provides @pipedream/platform without installing it", async () => {
    const out = await compileComponent(
      `import { axios } from "@pipedream/platform"; export default { name: "d", async run() { await axios(this, { url: "x" }); } };`,
      opts,
    );
    expect(out).toContain("returnFullResponse");
  });

  it("refuses a package that is not allowed", async () => {
    const err = await compileError(`import _ from "lodash"; export default { name: "e", async run() {} };`);
    expect(err.message).toMatch(/package lodash is not allowed/);
  });

  it("refuses @pipedream/platform when the operator took it off the allowlist", async () => {
    const err = await compileError(`import { axios } from "@pipedream/platform"; export default {};`, ["ms"]);
    expect(err.message).toMatch(/package @pipedream\/platform is not allowed/);
  });

  it.each(["fs", "node:fs", "child_process", "fs/promises", "node:child_process"])("refuses to import the built-in %s", async (mod) => {
    const err = await compileError(`import x from "${mod}"; export default { name: "f", x, async run() {} };`);
    expect(err.message).toMatch(/is not allowed/);
  });

  it("refuses built-ins even when an operator lists them", async () => {
    const err = await compileError(`import fs from "fs"; export default {};`, ["fs"]);
    expect(err.message).toMatch(/package fs is not allowed/);
  });

  it("turns require() of a refused module into a module that throws when loaded", async () => {
    const out = await compileComponent(`module.exports = { name: "g", async run() { try { require("fs"); } catch (e) {} } };`, opts);
    expect(out).toContain("package fs is not allowed");
    expect(out).not.toMatch(/require\("fs"\)/);
  });

  it("refuses paths and path tricks", async () => {
    expect((await compileError(`import x from "../x.js"; export default {};`)).message).toMatch(/single file/);
    expect((await compileError(`import x from "/etc/passwd"; export default {};`)).message).toMatch(/single file/);
    expect((await compileError(`import x from "ms/../../package.json"; export default {};`)).message).toMatch(/not allowed/);
  });

  it("reports syntax errors with the component's line and column", async () => {
    const err = await compileError("this is not javascript {");
    expect(err.message).toMatch(/^invalid component code: component\.js:1:6: Expected ";"/);
  });

  it("rejects top-level await, which CommonJS cannot express", async () => {
    const err = await compileError(`await 1; export default {};`);
    expect(err.message).toMatch(/Top-level await/);
  });
});

describe("packageName", () => {
  it.each([
    ["lodash", "lodash"],
    ["lodash/fp", "lodash"],
    ["@pipedream/platform", "@pipedream/platform"],
    ["@scope/pkg/sub/path", "@scope/pkg"],
  ])("%s is in package %s", (spec, name) => {
    expect(packageName(spec)).toBe(name);
  });
});
