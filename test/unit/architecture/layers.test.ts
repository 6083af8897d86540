import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

/**
 * Layers point one way (docs/architecture.md, "The map of the code"). Each top-level folder of src/ may import
 * itself and the folders listed here, nothing else; "root" is the files directly in src/
 * (daemon.ts, main.ts, paths.ts); `app/` holds the feature factories the root and the CLI build
 * from. A folder missing from the table fails the test, so a new
 * folder must take its place in it.
 */
const ALLOWED: Readonly<Record<string, readonly string[]>> = {
  domain: [],
  config: ["domain"],
  net: ["domain"],
  observability: ["domain"],
  queue: ["domain"],
  redis: ["domain", "observability", "config"],
  store: ["domain", "observability", "config"],
  services: ["domain", "store", "net", "observability", "config"],
  delivery: ["domain", "store", "queue", "net", "observability", "config"],
  events: ["domain", "store", "queue", "observability", "config", "delivery"],
  runtime: ["domain", "store", "queue", "net", "observability", "config", "events"],
  api: ["domain", "store", "queue", "net", "observability", "config", "events", "delivery", "runtime", "services"],
  app: ["domain", "store", "queue", "net", "observability", "config", "events", "delivery", "runtime", "services", "api"],
  cli: ["domain", "store", "queue", "net", "observability", "config", "services", "redis", "app", "root"],
  root: ["domain", "store", "queue", "net", "observability", "config", "redis", "app"],
};

const SRC = resolve(import.meta.dirname, "../../../src");

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return e.name.endsWith(".ts") ? [path] : [];
  });
}

/** The top-level folder of src/ a path lies in, or "root" for files directly in src/. */
function layerOf(path: string): string {
  const rel = relative(SRC, path).split("/");
  return rel.length === 1 ? "root" : (rel[0] as string);
}

/** Relative imports (static, dynamic and type-only) of a file, resolved to paths under src/. */
function importsOf(file: string): string[] {
  const info = ts.preProcessFile(readFileSync(file, "utf8"), true, true);
  return info.importedFiles
    .map((f) => f.fileName)
    .filter((name) => name.startsWith("."))
    .map((name) => resolve(dirname(file), name));
}

/** Every import that breaks the table, as "file → import (rule)". */
function wrongWayImports(files: readonly string[], allowed: Readonly<Record<string, readonly string[]>>): string[] {
  const problems: string[] = [];
  for (const file of files) {
    const from = layerOf(file);
    const rule = allowed[from];
    if (!rule) {
      problems.push(`${relative(SRC, file)}: folder "${from}" has no row in the layer table`);
      continue;
    }
    for (const target of importsOf(file)) {
      const to = layerOf(target);
      if (to !== from && !rule.includes(to)) {
        problems.push(`${relative(SRC, file)} imports ${relative(SRC, target)}: ${from}/ may import only ${rule.join(", ") || "itself"}`);
      }
    }
  }
  return problems;
}

describe("layers", () => {
  const files = sourceFiles(SRC);

  it("has no import that points the wrong way", () => {
    expect(files.length).toBeGreaterThan(50);
    expect(wrongWayImports(files, ALLOWED)).toEqual([]);
  });

  it("reports a wrong-way import with the file, the import and the rule", () => {
    // The same files judged by a table where runtime/ may not import events/: the check must see it.
    const strict = { ...ALLOWED, runtime: (ALLOWED.runtime ?? []).filter((l) => l !== "events") };
    const problems = wrongWayImports(files, strict);
    expect(problems.length).toBeGreaterThan(0);
    expect(problems.every((p) => p.startsWith("runtime/") && p.includes(" imports events/"))).toBe(true);
  });

  it("keeps domain/ free of every other folder", () => {
    const domain = files.filter((f) => layerOf(f) === "domain");
    expect(domain.length).toBeGreaterThan(10);
    for (const f of domain) for (const target of importsOf(f)) expect(layerOf(target), relative(SRC, f)).toBe("domain");
  });
});
