#!/usr/bin/env node
// Adds lockfile entries for platform-specific optional packages that the package registry of
// this environment does not serve (for example @biomejs/cli-darwin-arm64). `npm install` leaves
// them out of package-lock.json, and `npm ci` then refuses the lockfile ("Missing: … from lock
// file"). The stubs name the package, version and platform, so `npm ci` accepts the lockfile and
// skips them on every other platform, exactly as it would skip a real entry. Run it after any
// `npm install` that rewrites package-lock.json:  node scripts/lockfile-platform-stubs.mjs
import { readFileSync, writeFileSync } from "node:fs";

const OS = ["android", "darwin", "freebsd", "linux", "openbsd", "sunos", "win32", "aix"];
const CPU = ["arm64", "x64", "arm", "ia32", "ppc64", "s390x", "riscv64", "loong64", "mips64el"];

const path = new URL("../package-lock.json", import.meta.url);
const lock = JSON.parse(readFileSync(path, "utf8"));
const packages = lock.packages;
let added = 0;
for (const [where, entry] of Object.entries(packages)) {
  for (const [name, range] of Object.entries(entry.optionalDependencies ?? {})) {
    const key = `node_modules/${name}`;
    if (packages[key]) continue;
    const parts = name.split("/").pop().split("-");
    const os = parts.find((p) => OS.includes(p));
    const cpu = parts.find((p) => CPU.includes(p));
    const libc = parts.includes("musl") ? "musl" : undefined;
    packages[key] = {
      version: String(range).replace(/^[\^~=]/, ""),
      ...(entry.dev ? { dev: true } : {}),
      optional: true,
      ...(os ? { os: [os] } : {}),
      ...(cpu ? { cpu: [cpu] } : {}),
      ...(libc ? { libc: [libc] } : {}),
    };
    added++;
    console.log(`stub ${key}@${packages[key].version} (for ${where || "root"})`);
  }
}
lock.packages = Object.fromEntries(Object.entries(packages).sort(([a], [b]) => (a === "" ? -1 : b === "" ? 1 : a.localeCompare(b))));
writeFileSync(path, `${JSON.stringify(lock, null, 2)}\n`);
console.log(`${added} stub entr${added === 1 ? "y" : "ies"} added`);
