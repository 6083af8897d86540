import type { Redis } from "ioredis";
import type { RedisClient } from "../../src/store/context.js";
import { writeTogether } from "../../src/store/script.js";

/** Counts the writes (`_write`/`_writev` calls, one socket write each) of a connection's socket; observing only. */
export function countSocketWrites(connection: Redis): { count(): number; stop(): void } {
  const socket = connection.stream as unknown as Record<"_write" | "_writev", (...a: unknown[]) => unknown>;
  let n = 0;
  const originals = { _write: socket._write, _writev: socket._writev };
  for (const m of ["_write", "_writev"] as const) {
    const original = originals[m];
    socket[m] = function (this: unknown, ...a: unknown[]) {
      n++;
      return original.apply(this, a);
    };
  }
  return {
    count: () => n,
    stop: () => Object.assign(socket, originals),
  };
}

/** Runs `send` in a `setImmediate` callback (the check phase); resolves with what it returned and the socket writes made before it returned. */
export function writesInCheckPhase<T>(writes: { count(): number }, send: () => T): Promise<{ writes: number; value: T }> {
  return new Promise((resolve) =>
    setImmediate(() => {
      const before = writes.count();
      const value = send();
      resolve({ writes: writes.count() - before, value });
    }),
  );
}

/**
 * From the check phase (a `setImmediate` callback), one INCR of `key` sent plainly, then three sent
 * inside `writeTogether`: the socket writes each made before its callback returned, and the replies.
 */
export async function incrsFromCheckPhase(client: RedisClient, writes: { count(): number }, key: string) {
  const plain = await writesInCheckPhase(writes, () => client.incr(key));
  const together = await writesInCheckPhase(writes, () => {
    const sent: Promise<unknown>[] = [];
    writeTogether(client, () => {
      for (let i = 0; i < 3; i++) sent.push(client.incr(key));
    });
    return sent;
  });
  return {
    plain: { writes: plain.writes, value: await plain.value },
    together: { writes: together.writes, values: await Promise.all(together.value) },
  };
}
