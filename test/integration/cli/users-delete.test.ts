import path from "node:path";
import { Queue } from "bullmq";
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runCli } from "../../../src/cli/run.js";
import { QUEUES } from "../../../src/queue/catalog.js";
import { schedulerId } from "../../../src/runtime/timers.js";
import { createKeys } from "../../../src/store/keys.js";
import { type Client, client, startTestDaemon, type TestDaemon } from "../../helpers/daemon.js";
import { type Receiver, startReceiver, waitFor } from "../../helpers/receiver.js";
import { connectRedis, redisUrl } from "../../helpers/redis.js";

/**
 * Deleting a user through the CLI (`tributary users delete`) does what DELETE /admin/users/{id}
 * does: each source is deleted as a source deletion would be, so its deactivate hook runs and its
 * timer stops. Hooks report to a loopback receiver.
 */

/** A timer source whose hooks report themselves (Pipedream's register/unregister shape). */
const TIMED = `module.exports = {
  name: "CLI Timed",
  version: "0.0.1",
  props: {
    timer: { type: "$.interface.timer", default: { intervalSeconds: 1 } },
    hookUrl: { type: "string", label: "Where hooks report" },
  },
  hooks: {
    async activate() { await fetch(this.hookUrl + "?hook=activate&source=" + process.env.PD_COMPONENT); },
    async deactivate() { await fetch(this.hookUrl + "?hook=deactivate&source=" + process.env.PD_COMPONENT); },
  },
  async run() {},
};
`;

let td: TestDaemon;
let rx: Receiver;
let redis: Redis;
let timers: Queue;
let admin: Client;

beforeAll(async () => {
  td = await startTestDaemon();
  rx = await startReceiver();
  redis = connectRedis();
  timers = new Queue(QUEUES.timers, { connection: redis, prefix: createKeys(td.prefix).queuePrefix("timers") });
  admin = client(td.url, td.adminToken);
});

afterAll(async () => {
  await timers?.close();
  await rx?.close();
  redis?.disconnect();
  await td?.close();
});

function hooksOf(hookPath: string, sourceId: string): string[] {
  return rx
    .to(hookPath)
    .map((r) => new URL(r.path, "http://x").searchParams)
    .filter((p) => p.get("source") === sourceId)
    .map((p) => p.get("hook") ?? "");
}

/** `tributary users delete <id>` against the test daemon's Redis and key prefix. */
async function cliDelete(userId: string): Promise<void> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await runCli(
    ["users", "delete", userId],
    { REDIS_URL: redisUrl(), REDIS_KEY_PREFIX: td.prefix, ALLOW_PRIVATE_DESTINATIONS: "true", LOG_LEVEL: "silent" },
    { stdout: (t) => out.push(t), stderr: (t) => err.push(t) },
    { registryDir: path.resolve(import.meta.dirname, "../../../registry") },
  );
  expect(code, err.join("")).toBe(0);
  expect(JSON.parse(out.join(""))).toEqual({ id: userId, deleted: true });
}

async function adminDelete(userId: string): Promise<void> {
  const res = await admin.del(`/admin/users/${userId}`);
  expect(res.status, res.text).toBe(204);
}

describe.each([
  { via: "the admin API", remove: adminDelete },
  { via: "the CLI", remove: cliDelete },
])("deleting a user through $via", ({ remove }) => {
  it("runs each active source's deactivate hook and removes its timer", async () => {
    const u = await td.createUser();
    const hookPath = `/hooks/${Math.random().toString(36).slice(2)}`;
    const res = await u.api.post("/v1/sources", { json: { component_code: TIMED, configured_props: { hookUrl: rx.url(hookPath) } } });
    expect(res.status, res.text).toBe(200);
    const s = res.body.data;
    await waitFor(() => timers.getJobScheduler(schedulerId(s.id)), { what: "the timer's job scheduler" });
    expect(hooksOf(hookPath, s.id)).toEqual(["activate"]);

    await remove(u.id);

    await waitFor(() => hooksOf(hookPath, s.id).length === 2, { what: "the deactivate hook" });
    expect(hooksOf(hookPath, s.id)).toEqual(["activate", "deactivate"]);
    await waitFor(async () => (await timers.getJobScheduler(schedulerId(s.id))) === undefined, {
      what: "the timer's job scheduler to be removed",
    });
    expect(await redis.keys(`${createKeys(td.prefix).userKeyBase(u.id)}:*`)).toEqual([]);
    expect((await u.api.get("/v1/users/me")).status).toBe(401);
  });
});

describe("tributary users delete", () => {
  it("fails with a message for an unknown user", async () => {
    const err: string[] = [];
    const code = await runCli(
      ["users", "delete", "u_neverexisted000"],
      { REDIS_URL: redisUrl(), REDIS_KEY_PREFIX: td.prefix, LOG_LEVEL: "silent" },
      { stdout: () => {}, stderr: (t) => err.push(t) },
    );
    expect(code).toBe(1);
    expect(err.join("")).toMatch(/user not found/);
  });
});
