#!/usr/bin/env node
// `npm start`'s build step: runs tsc (tsconfig.build.json, incremental) only when something it
// reads changed since the last build this script made, so a second start with nothing changed
// does not pay for a type check. "Changed" is any file or directory under src/ (a directory's
// time changes when a file in it is added or removed), a tsconfig or the package files being newer
// than dist/.build-stamp, or dist/src/main.js missing. `npm run build` always builds.
//   node scripts/build-if-stale.mjs [--check]   (--check: print "stale" or "fresh", build nothing)
import { spawnSync } from "node:child_process";
import { readdirSync, statSync, utimesSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const root = path.resolve(import.meta.dirname, "..");
const stamp = path.join(root, "dist", ".build-stamp");
const INPUTS = ["tsconfig.json", "tsconfig.build.json", "package.json", "package-lock.json"];

function mtimeMs(file) {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return undefined;
  }
}

/** The newest modification time under `dir`, directories included. */
function newestUnder(dir) {
  let newest = mtimeMs(dir) ?? 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    newest = Math.max(newest, entry.isDirectory() ? newestUnder(full) : (mtimeMs(full) ?? 0));
  }
  return newest;
}

function stale() {
  const built = mtimeMs(stamp);
  if (built === undefined || mtimeMs(path.join(root, "dist", "src", "main.js")) === undefined) return true;
  const inputs = Math.max(newestUnder(path.join(root, "src")), ...INPUTS.map((f) => mtimeMs(path.join(root, f)) ?? 0));
  return inputs > built;
}

if (process.argv.includes("--check")) {
  process.stdout.write(stale() ? "stale\n" : "fresh\n");
} else if (stale()) {
  // The stamp's time is the build's start: a file saved while tsc runs makes the next start build again.
  const started = new Date();
  process.stderr.write("tributary: building dist/ (sources changed since the last build)\n");
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  const r = spawnSync(process.execPath, [tsc, "-p", path.join(root, "tsconfig.build.json")], { cwd: root, stdio: "inherit" });
  if (r.status !== 0) process.exit(r.status ?? 1);
  writeFileSync(stamp, `${started.toISOString()}\n`);
  utimesSync(stamp, started, started);
}
