import { createKeys } from "../../src/store/keys.js";
import { keySlot, type LocalCluster } from "./cluster.js";
import { type Client, client } from "./daemon.js";
import type { DaemonChild } from "./process.js";
import { waitFor } from "./wait.js";

/**
 * Users, webhooks and emits of the end-to-end cluster tests (test/integration/cluster), through the
 * HTTP API of daemon processes on a local Redis Cluster.
 */

export interface E2eUser {
  readonly id: string;
  readonly apiKey: string;
  readonly api: Client;
  /** The user's shard (OUTBOX_SHARDS default 16) and the port of the master that held it at creation. */
  readonly shard: number;
  readonly nodePort: number;
}

/** Creates a user through the admin API of `api` (ADMIN_TOKEN). */
export async function createUser(api: DaemonChild, adminToken: string, prefix: string, cluster: LocalCluster): Promise<E2eUser> {
  const tag = Math.random().toString(16).slice(2, 10);
  const res = await client(api.url, adminToken).post("/admin/users", { json: { username: `u${tag}`, email: `u${tag}@example.com` } });
  if (res.status !== 201) throw new Error(`create user: ${res.status} ${res.text}`);
  const { id, api_key: apiKey } = res.body.data as { id: string; api_key: string };
  const keys = createKeys(prefix);
  return {
    id,
    apiKey,
    api: client(api.url, apiKey),
    shard: keys.shardOf(id),
    nodePort: cluster.nodeForSlot(keySlot(keys.userKeyBase(id))).port,
  };
}

/** Creates users until they cover every shard of the default 16 (or `max` users were made). */
export async function usersOnEveryShard(
  api: DaemonChild,
  adminToken: string,
  prefix: string,
  cluster: LocalCluster,
  opts: { min?: number; max?: number } = {},
): Promise<E2eUser[]> {
  const users: E2eUser[] = [];
  const shards = createKeys(prefix).shards;
  while (users.length < (opts.min ?? 0) || new Set(users.map((u) => u.shard)).size < shards) {
    if (users.length >= (opts.max ?? 200))
      throw new Error(`${users.length} users cover only ${new Set(users.map((u) => u.shard)).size} shards`);
    users.push(await createUser(api, adminToken, prefix, cluster));
  }
  return users;
}

/** A webhook of `user` to `url` subscribed to the workflow `workflow`; returns the webhook id. */
export async function hookUp(user: E2eUser, url: string, workflow: string): Promise<string> {
  const hook = await user.api.post("/v1/webhooks", { json: { url, name: `hook-${user.id}` } });
  if (hook.status !== 200) throw new Error(`webhook: ${hook.status} ${hook.text}`);
  const sub = await user.api.post("/v1/subscriptions", { json: { emitter_id: workflow, listener_id: hook.body.data.id } });
  if (sub.status !== 200) throw new Error(`subscription: ${sub.status} ${sub.text}`);
  return String(hook.body.data.id);
}

export interface EmitResult {
  readonly user: string;
  readonly n: number;
  readonly status: number;
  readonly id: string | undefined;
  readonly retryAfter: string | null;
  readonly code: string | undefined;
  /** When the request was sent and how long it took. */
  readonly at: number;
  readonly ms: number;
}

/** One emit to `workflow`; a network error or timeout is status 0. */
export async function emit(url: string, user: E2eUser, workflow: string, n: number, timeoutMs = 60_000): Promise<EmitResult> {
  const at = Date.now();
  try {
    const res = await fetch(`${url}/v1/workflows/${workflow}/events`, {
      method: "POST",
      headers: { authorization: `Bearer ${user.apiKey}`, "content-type": "application/json" },
      body: JSON.stringify({ event: { n, user: user.id } }),
      signal: AbortSignal.timeout(timeoutMs),
    });
    const body = (await res.json().catch(() => undefined)) as { data?: { id?: string }; code?: string } | undefined;
    return {
      user: user.id,
      n,
      status: res.status,
      id: body?.data?.id,
      retryAfter: res.headers.get("retry-after"),
      code: body?.code,
      at,
      ms: Date.now() - at,
    };
  } catch {
    return { user: user.id, n, status: 0, id: undefined, retryAfter: null, code: undefined, at, ms: Date.now() - at };
  }
}

/** Waits until every id in `ids` is in `seen`; the failure names how many are missing. */
export async function allDelivered(ids: readonly string[], seen: ReadonlyMap<string, number>, timeoutMs: number): Promise<void> {
  await waitFor(() => ids.every((id) => seen.has(id)), {
    timeoutMs,
    intervalMs: 200,
    what: `delivery of ${ids.length} events (missing: ${ids.filter((id) => !seen.has(id)).length})`,
  }).catch((err: Error) => {
    const missing = ids.filter((id) => !seen.has(id));
    throw new Error(`${err.message}; ${missing.length} missing, e.g. ${missing.slice(0, 5).join(", ")}`);
  });
}
