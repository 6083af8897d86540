import { createHash } from "node:crypto";
import { Cluster, Command, type Redis } from "ioredis";
import type { RedisClient } from "./context.js";

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

/** Redis answers NOSCRIPT to an EVALSHA of a script its cache does not hold (a restart, SCRIPT FLUSH). */
function isNoScript(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith("NOSCRIPT");
}

/**
 * The one loader of Lua scripts: returns a typed caller. The first call on each socket of the
 * connection sends the script itself (`EVAL`, which also caches it in Redis), later ones `EVALSHA`;
 * an EVALSHA answered NOSCRIPT (SCRIPT FLUSH, a Redis that restarted while a command was queued)
 * is sent again as EVAL. This is what ioredis does for a custom command.
 *
 * Script calls are plain EVAL/EVALSHA commands handed to the connection (`sendCommand`), not
 * ioredis custom commands, and they skip ioredis's auto-pipeline. Every auto-pipeline is an ioredis
 * `Pipeline`, which copies each custom command of its connection onto itself (some thirty scripts)
 * and, worse, keeps the commands of a tick reachable long enough that the young-generation
 * collector promotes them: about 600 KB per scavenge under single emits, which made garbage
 * collection cost several times what the request's own allocations do (docs/decisions.md
 * "Single-emit ingest cost"). On an auto-pipelined connection the calls of one tick still share one
 * socket write: the first call corks the socket and a `setImmediate` uncorks it, when ioredis would
 * have flushed its auto-pipeline. A call made while commands issued before it still wait in the
 * auto-pipeline joins that pipeline instead, behind them (issue order is kept).
 * (The daemon's request-path connection is no auto-pipelined one but a tick-batched client,
 * app/redis-client.ts, which corks the socket for every command of a tick; calls go straight to it.)
 */
export function defineScript(redis: RedisClient, def: ScriptDef): ScriptCall {
  return redis instanceof Cluster ? defineClusterScript(redis, def) : defineNodeScript(redis, def);
}

/**
 * On a Redis Cluster each node has its own script cache and the client routes by the first key's
 * slot, so the caller sends EVALSHA and falls back to EVAL on NOSCRIPT (the node's cache lacks it:
 * the first call there, a failover to a replica, SCRIPT FLUSH). The Cluster client batches the
 * commands of a tick per node itself (auto-pipelining), so there is no socket to cork.
 */
function defineClusterScript(redis: Cluster, def: ScriptDef): ScriptCall {
  const { name, numberOfKeys, lua } = def;
  const sha = createHash("sha1").update(lua).digest("hex");
  return (keys, args) => {
    if (keys.length !== numberOfKeys) throw new Error(`script ${name} takes ${numberOfKeys} keys, got ${keys.length}`);
    return redis.evalsha(sha, numberOfKeys, ...keys, ...args).catch((err: unknown) => {
      if (!isNoScript(err)) throw err;
      return redis.eval(lua, numberOfKeys, ...keys, ...args);
    });
  };
}

/** One RESP bulk string: `$<bytes>\r\n<text>\r\n`. */
const bulk = (text: string) => `$${Buffer.byteLength(text)}\r\n${text}\r\n`;

/**
 * The RESP frame of a script call, written in one pass: `head` (the command name, the script or
 * its digest, and the key count, framed once per script), then each key and argument. ioredis's
 * `Command` would copy the arguments twice (the caller's spread, its own `flat()`), type-check
 * each, and concatenate the same frame in `toWritable`: about a quarter of a record-sized call's
 * client CPU (docs/decisions.md "Single-emit ingest cost, third pass").
 */
function scriptFrame(head: string, parts: number, keys: readonly string[], args: readonly (string | number)[]): string {
  let frame = `*${parts + keys.length + args.length}\r\n${head}`;
  for (const key of keys) frame += bulk(key);
  for (const arg of args) frame += bulk(typeof arg === "string" ? arg : String(arg));
  return frame;
}

/**
 * Runs `send` (script calls made in the check phase, where a cork's `setImmediate` would wait a
 * whole turn of the event loop) with the connection's socket corked, and writes what it sent at
 * once: one socket write for all (on a Cluster, one per master).
 */
export function writeTogether(redis: RedisClient, send: () => void): void {
  // The daemon's tick-batched clients (app/redis-client.ts `TickBatchedRedis`, `TickBatchedCluster`) do it themselves.
  const batched = redis as RedisClient & { writeTogether?: (send: () => void) => void };
  if (typeof batched.writeTogether === "function") {
    batched.writeTogether(send);
    return;
  }
  if (redis instanceof Cluster || redis.status !== "ready") {
    send();
    return;
  }
  const socket = redis.stream;
  socket.cork();
  try {
    send();
  } finally {
    socket.uncork();
  }
}

function defineNodeScript(redis: Redis, def: ScriptDef): ScriptCall {
  const { name, numberOfKeys, lua } = def;
  const sha = createHash("sha1").update(lua).digest("hex");
  const heads = {
    eval: bulk("eval") + bulk(lua) + bulk(String(numberOfKeys)),
    evalsha: bulk("evalsha") + bulk(sha) + bulk(String(numberOfKeys)),
  };
  /** Sockets this script was sent on in full (a reconnection opens a new one). */
  const loadedOn = new WeakSet<object>();
  const batchWrites = redis.options.enableAutoPipelining === true;
  /** The socket this caller corked in the current tick, if any. */
  let corked: { uncork(): void } | undefined;
  const uncork = () => {
    const c = corked;
    corked = undefined;
    c?.uncork();
  };
  const send = (command: "eval" | "evalsha", head: string, keys: readonly string[], args: readonly (string | number)[]) => {
    // Commands issued before this call that still wait in ioredis's auto-pipeline go first: the
    // call queues behind them, so Redis sees the connection's commands in the order they were issued.
    if (batchWrites && redis.autoPipelineQueueSize > 0) {
      return command === "eval" ? redis.eval(head, numberOfKeys, ...keys, ...args) : redis.evalsha(head, numberOfKeys, ...keys, ...args);
    }
    if (batchWrites && corked === undefined && redis.status === "ready" && redis.stream.writableCorked === 0) {
      // (A socket corked already is uncorked by whoever corked it: `writeTogether`, another script.)
      const socket = redis.stream;
      socket.cork();
      corked = socket;
      setImmediate(uncork);
    }
    // A plain ioredis Command (its reply, promise, timeout, offline queue and resend are ioredis's)
    // whose frame is ours. Its `args` stay empty: ioredis reads them only for debug output and
    // traces. Not a subclass of Command: instances of one were kept past young-generation
    // collections in the daemon (docs/decisions.md, same section).
    const cmd = new Command(command, [], { replyEncoding: "utf8" });
    const frame = scriptFrame(heads[command], 3, keys, args);
    cmd.toWritable = () => frame;
    redis.sendCommand(cmd);
    return cmd.promise;
  };
  return (keys, args) => {
    if (keys.length !== numberOfKeys) throw new Error(`script ${name} takes ${numberOfKeys} keys, got ${keys.length}`);
    const socket: object | undefined = redis.stream;
    if (socket === undefined || !loadedOn.has(socket)) {
      if (socket !== undefined) loadedOn.add(socket);
      return send("eval", lua, keys, args);
    }
    return send("evalsha", sha, keys, args).catch((err: unknown) => {
      if (!isNoScript(err)) throw err;
      loadedOn.delete(socket);
      return send("eval", lua, keys, args);
    });
  };
}
