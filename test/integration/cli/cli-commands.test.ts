import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { runCli } from "../../../src/cli/run.js";

/** The CLI's answers to a mistyped command line, its version, and its run from the build. */
const ROOT = path.resolve(import.meta.dirname, "../../..");
const pkg = JSON.parse(readFileSync(path.join(ROOT, "package.json"), "utf8")) as {
  version: string;
  bin: { tributary: string };
  scripts: Record<string, string>;
};

async function cli(...argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  // No Redis settings: none of these may need Redis.
  const code = await runCli(argv, { LOG_LEVEL: "silent" }, { stdout: (t) => (out += t), stderr: (t) => (err += t) });
  return { code, out, err };
}

describe("the CLI's command line", () => {
  it("names an unknown command and lists the known ones", async () => {
    const r = await cli("user", "create");
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/^tributary: unknown command "user" \(commands: users, migrate, cluster, healthcheck\)\n/);
    const sub = await cli("users", "add");
    expect(sub.code).toBe(2);
    expect(sub.err).toMatch(/^tributary: unknown command "users add" \(users commands: create, list, rotate-key, delete\)\n/);
    expect((await cli("cluster")).err).toMatch(/^tributary: "cluster" needs a command: shards\n/);
  });

  it("prints its version", async () => {
    for (const flag of ["--version", "-v"]) expect(await cli(flag)).toEqual({ code: 0, out: `tributary ${pkg.version}\n`, err: "" });
  });

  it("says which option users create is missing", async () => {
    const none = await cli("users", "create");
    expect(none.code).toBe(2);
    expect(none.err).toMatch(/^tributary users create: --username and --email are missing \(usage: tributary users create --username NAME/);
    expect((await cli("users", "create", "--username", "ann")).err).toMatch(/^tributary users create: --email is missing/);
    expect((await cli("users", "create", "--email", "a@example.com")).err).toMatch(/^tributary users create: --username is missing/);
  });

  it("runs from the build: `npm run cli` and the package's bin are dist/src/cli/main.js", () => {
    expect(pkg.bin.tributary).toBe("dist/src/cli/main.js");
    expect(pkg.scripts.cli).toMatch(/dist\/src\/cli\/main\.js$/);
    expect(pkg.scripts.cli).not.toContain("tsx");
    execFileSync(process.execPath, [path.join(ROOT, "scripts", "build-if-stale.mjs")], { cwd: ROOT, stdio: "ignore" });
    const out = execFileSync(process.execPath, ["--no-node-snapshot", path.join(ROOT, pkg.bin.tributary), "--version"], {
      encoding: "utf8",
    });
    expect(out).toBe(`tributary ${pkg.version}\n`);
  }, 180_000);
});
