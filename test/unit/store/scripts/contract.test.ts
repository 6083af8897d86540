import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { type ScriptDef, script } from "../../../../src/store/script.js";

/**
 * Every Lua script lives in src/store/scripts/, one file each, declared through `script()` with a
 * fixed number of keys (on Redis Cluster a key count passed as an argument routes by that number)
 * and a comment stating its KEYS/ARGV contract.
 */
const DIR = join(import.meta.dirname, "../../../../src/store/scripts");

async function definitions(): Promise<{ file: string; defs: ScriptDef[]; source: string }[]> {
  const files = readdirSync(DIR).filter((f) => f.endsWith(".ts"));
  return Promise.all(
    files.map(async (file) => {
      const mod = (await import(join(DIR, file))) as Record<string, unknown>;
      const defs = Object.values(mod).filter((v): v is ScriptDef => typeof v === "object" && v !== null && "lua" in v);
      return { file, defs, source: readFileSync(join(DIR, file), "utf8") };
    }),
  );
}

describe("store/scripts", () => {
  it("holds one script per file, each with a fixed key count and a KEYS/ARGV contract", async () => {
    const all = await definitions();
    expect(all.length).toBeGreaterThanOrEqual(10);
    const names = new Set<string>();
    for (const { file, defs, source } of all) {
      expect(defs, file).toHaveLength(1);
      const def = defs[0] as ScriptDef;
      expect(Number.isInteger(def.numberOfKeys) && def.numberOfKeys >= 1, file).toBe(true);
      // The script reads no key beyond those it declares.
      const used = [...def.lua.matchAll(/KEYS\[(\d+)\]/g)].map((m) => Number(m[1]));
      expect(Math.max(...used), file).toBeLessThanOrEqual(def.numberOfKeys);
      expect(def.lua, file).not.toMatch(/unpack\(KEYS/);
      expect(source, file).toMatch(/KEYS\[1\]/);
      expect(source, file).toMatch(/ARGV|No ARGV/);
      expect(names.has(def.name), `${file}: command name ${def.name} used twice`).toBe(false);
      names.add(def.name);
    }
  });

  it("refuses a script declared without a positive, whole key count", () => {
    expect(() => script("x", 0, "return 1")).toThrow(/key count/);
    expect(() => script("x", 1.5, "return 1")).toThrow(/key count/);
    expect(script("x", 2, "return 1").numberOfKeys).toBe(2);
  });
});
