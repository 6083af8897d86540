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

type CommandMethod = (...args: (string | number)[]) => Promise<unknown>;

/**
 * The one loader of Lua scripts: defines a script as a custom command of the connection (EVALSHA
 * with a NOSCRIPT fallback) and returns a typed caller. Call it in a constructor, never lazily: an
 * auto-pipeline already open in the same tick lacks commands defined after it (ioredis copies them
 * when it is created). The key count is fixed, so the auto-pipeline groups each call by its first
 * key (on Redis Cluster a script whose key count is passed as an argument is grouped by that
 * number instead).
 */
export function defineScript(redis: Redis, def: ScriptDef): ScriptCall {
  const { name, numberOfKeys, lua } = def;
  if (!(name in redis)) redis.defineCommand(name, { numberOfKeys, lua });
  const method = (redis as unknown as Record<string, CommandMethod>)[name];
  if (typeof method !== "function") throw new Error(`script ${name} could not be defined`);
  return (keys, args) => {
    if (keys.length !== numberOfKeys) throw new Error(`script ${name} takes ${numberOfKeys} keys, got ${keys.length}`);
    return method.call(redis, ...keys, ...args);
  };
}
