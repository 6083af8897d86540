import { createHash } from "node:crypto";
import type { Redis } from "ioredis";

/**
 * A Lua script of `src/store/scripts/`: its command name on the connection, its fixed number of
 * keys (KEYS), and its source. Each script file documents its KEYS/ARGV contract.
 */
export interface ScriptDef {
  readonly name: string;
  readonly numberOfKeys: number;
  readonly lua: string;
}

/** Declares a script (in its own file under `src/store/scripts/`). */
export function script(name: string, numberOfKeys: number, lua: string): ScriptDef {
  if (!Number.isInteger(numberOfKeys) || numberOfKeys < 1) throw new Error(`script ${name}: the key count must be a positive integer`);
  return Object.freeze({ name, numberOfKeys, lua });
}

/** Calls a Lua script defined on a connection: exactly `numberOfKeys` keys, then the arguments. */
export type ScriptCall = (keys: readonly string[], args: readonly (string | number)[]) => Promise<unknown>;

/**
 * The one loader of Lua scripts: returns a typed caller that sends EVALSHA, the script's source
 * (EVAL) on its first call and after a NOSCRIPT (Redis restarted or its script cache flushed).
 * Plain EVAL/EVALSHA commands rather than ioredis custom commands (`defineCommand`): ioredis copies
 * every custom command onto each pipeline it creates, and it creates one per auto-pipelined batch,
 * so each script defined on a connection made every round trip of that connection dearer
 * (docs/decisions.md "HTTP-source relay cost"). The key count is fixed, so the auto-pipeline
 * groups each call by its first key.
 */
export function defineScript(redis: Redis, def: ScriptDef): ScriptCall {
  const { name, numberOfKeys, lua } = def;
  const sha = createHash("sha1").update(lua).digest("hex");
  // Per caller: its first call loads the script (later calls in the same batch follow it in order).
  let sent = false;
  const evalSource = (params: (string | number)[]) => redis.eval(lua, numberOfKeys, ...params);
  return (keys, args) => {
    if (keys.length !== numberOfKeys) throw new Error(`script ${name} takes ${numberOfKeys} keys, got ${keys.length}`);
    const params = [...keys, ...args];
    if (!sent) {
      sent = true;
      return evalSource(params);
    }
    return redis.evalsha(sha, numberOfKeys, ...params).catch((err: unknown) => {
      if (err instanceof Error && err.message.includes("NOSCRIPT")) return evalSource(params);
      throw err;
    });
  };
}
