import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";

/** `npm start` builds only when the sources changed since its last build (scripts/build-if-stale.mjs). */
const ROOT = path.resolve(import.meta.dirname, "../../..");
const dir = mkdtempSync(path.join(tmpdir(), "tributary-stale-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const write = (rel: string, text = "") => {
  mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
  writeFileSync(path.join(dir, rel), text);
};
const at = (rel: string, secondsAgo: number) => {
  const t = new Date(Date.now() - secondsAgo * 1000);
  utimesSync(path.join(dir, rel), t, t);
};
const check = () =>
  execFileSync(process.execPath, [path.join(dir, "scripts", "build-if-stale.mjs"), "--check"], { encoding: "utf8" }).trim();

describe("build-if-stale", () => {
  it("is fresh when nothing under src/ or the configs is newer than the last build, stale otherwise", () => {
    write("scripts/build-if-stale.mjs");
    copyFileSync(path.join(ROOT, "scripts", "build-if-stale.mjs"), path.join(dir, "scripts", "build-if-stale.mjs"));
    for (const f of ["tsconfig.json", "tsconfig.build.json", "package.json", "package-lock.json", "src/a/b.ts", "src/main.ts"]) {
      write(f);
      at(f, 100);
    }
    at("src/a", 100);
    at("src", 100);
    expect(check()).toBe("stale"); // never built
    write("dist/src/main.js");
    write("dist/.build-stamp");
    at("dist/.build-stamp", 50);
    expect(check()).toBe("fresh");

    at("src/a/b.ts", 10); // an edited source
    expect(check()).toBe("stale");
    at("src/a/b.ts", 100);
    expect(check()).toBe("fresh");

    rmSync(path.join(dir, "src/a/b.ts")); // a removed source changes its directory
    expect(check()).toBe("stale");
    at("src/a", 100);
    expect(check()).toBe("fresh");

    at("package-lock.json", 10); // new dependencies
    expect(check()).toBe("stale");
    at("package-lock.json", 100);

    rmSync(path.join(dir, "dist/src/main.js"));
    expect(check()).toBe("stale");
  });
});
