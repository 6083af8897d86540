import { readdirSync, readFileSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import ts from "typescript";
import { describe, expect, it } from "vitest";

/**
 * `store/` owns Redis (docs/architecture.md, "The map of the code"): outside `src/store/` (and `src/redis/`,
 * which runs the embedded redis-server) no code sends a Redis command or holds Lua. Judged with the
 * type checker, so a connection under any name is seen: a call of a method on an ioredis
 * connection, pipeline or transaction is a command, except the connection-level methods below.
 */
const CONNECTION_METHODS = new Set(["ping", "quit", "disconnect", "on", "once", "off", "removeListener", "duplicate", "connect"]);
const REDIS_TYPES = new Set(["Redis", "Cluster", "Pipeline", "ChainableCommander", "Commander", "RedisCommander"]);
const ROOT = resolve(import.meta.dirname, "../../..");
const SRC = join(ROOT, "src");
const OWNERS = ["store", "redis"].map((d) => join(SRC, d) + "/");

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return e.name.endsWith(".ts") ? [path] : [];
  });
}

const outsideStore = (f: string) => !OWNERS.some((o) => f.startsWith(o));

/** Names of a type and its base types (an ioredis connection is a `Redis`, its pipeline a `ChainableCommander`). */
function typeNames(type: ts.Type): string[] {
  const names: string[] = [];
  for (const t of type.isUnionOrIntersection() ? type.types : [type]) {
    const symbol = t.getSymbol() ?? t.aliasSymbol;
    if (symbol) names.push(symbol.getName());
    for (const base of t.getBaseTypes?.() ?? []) names.push(...typeNames(base));
  }
  return names;
}

/** Redis command calls in the files `judged` picks, as "file:line method". */
function redisCalls(files: readonly string[], judged: (file: string) => boolean = outsideStore): string[] {
  const program = ts.createProgram(files as string[], {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    skipLibCheck: true,
    noEmit: true,
  });
  const checker = program.getTypeChecker();
  const found: string[] = [];
  for (const file of files.filter(judged)) {
    const sf = program.getSourceFile(file);
    if (!sf) throw new Error(`not in the program: ${file}`);
    const visit = (node: ts.Node): void => {
      if (ts.isCallExpression(node) && ts.isPropertyAccessExpression(node.expression)) {
        const method = node.expression.name.text;
        // `super.<method>(…)`: a client subclass (app/redis-client.ts, app/sentinel-client.ts)
        // forwarding to ioredis is the connection itself, not a command sent through it.
        const viaSuper = node.expression.expression.kind === ts.SyntaxKind.SuperKeyword;
        if (!CONNECTION_METHODS.has(method) && !viaSuper) {
          const receiver = checker.getTypeAtLocation(node.expression.expression);
          if (typeNames(receiver).some((n) => REDIS_TYPES.has(n))) {
            const { line } = sf.getLineAndCharacterOfPosition(node.getStart());
            found.push(`${relative(SRC, file)}:${line + 1} ${method}`);
          }
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(sf);
  }
  return found;
}

/** Lua outside store/scripts: `redis.call(` / `redis.pcall(` in any string or template. */
function luaOutsideScripts(files: readonly string[]): string[] {
  return files
    .filter((f) => !f.startsWith(join(SRC, "store", "scripts") + "/"))
    .filter((f) => /redis\.p?call\(/.test(readFileSync(f, "utf8")))
    .map((f) => relative(SRC, f));
}

describe("store/ owns Redis", () => {
  const files = sourceFiles(SRC);

  it("sends no Redis command outside src/store/", () => {
    expect(redisCalls(files)).toEqual([]);
  }, 60_000);

  it("sees the commands a file sends, whatever its connection is called", () => {
    // Judged by the same rule, store/ files are full of commands: the check must find them.
    const calls = redisCalls(files, (f) => f.endsWith("/store/events.ts") || f.endsWith("/store/shard-streams.ts"));
    expect(calls.some((c) => c.startsWith("store/events.ts:") && c.endsWith(" xlen"))).toBe(true);
    expect(calls.some((c) => c.startsWith("store/shard-streams.ts:") && c.endsWith(" xautoclaim"))).toBe(true);
    expect(calls.some((c) => c.startsWith("store/shard-streams.ts:") && c.endsWith(" exec"))).toBe(true);
  }, 60_000);

  it("keeps every Lua script in src/store/scripts/", () => {
    expect(luaOutsideScripts(files)).toEqual([]);
  });
});
