import { randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { beforeAll, describe, expect, it } from "vitest";
import { createKeys } from "../../../src/store/keys.js";
import { type WebhookRecord, WebhookStore } from "../../../src/store/webhooks.js";
import { sharedKeySpace } from "../../helpers/redis.js";

/**
 * WebhookStore's read-modify-write updates (secret rotations, patches) against a real Redis:
 * concurrent calls in one process issue their reads in the same tick, so without the
 * compare-and-set every one of them would write back a version the others had already replaced.
 */
const space = sharedKeySpace();
const keys = createKeys(space.prefix);
let redis: Redis;

beforeAll(() => {
  redis = space.redis();
});

const newSecret = () => `whsec_${randomBytes(24).toString("base64")}`;

function store(now: () => number = Date.now): WebhookStore {
  return new WebhookStore({ redis: space.connect(), keys, now, randomBytes });
}

const newHook = (s: WebhookStore, userId: string) =>
  s.create(userId, { url: "https://example.com/hook", name: null, description: null, signingSecret: newSecret() });

describe("WebhookStore.rotateSecret", () => {
  it("keeps the replaced secret with the end of its overlap, and only the most recent one", async () => {
    let now = 1_700_000_000_000;
    const s = store(() => now);
    const hook = await newHook(s, "u_rot1");
    const second = newSecret();
    expect(await s.rotateSecret("u_rot1", hook.id, second, 60_000)).toMatchObject({
      signing_secret: second,
      previous_signing_secret: hook.signing_secret,
      previous_secret_expires_at_ms: now + 60_000,
      updated_at: Math.floor(now / 1000),
    });
    now += 1000;
    const third = newSecret();
    await s.rotateSecret("u_rot1", hook.id, third, 60_000);
    expect(await s.get("u_rot1", hook.id)).toMatchObject({
      signing_secret: third,
      previous_signing_secret: second,
      previous_secret_expires_at_ms: now + 60_000,
    });
  });

  it("answers undefined for a missing or deleted webhook and does not resurrect it", async () => {
    const s = store();
    expect(await s.rotateSecret("u_rot2", "wh_missing", newSecret(), 1000)).toBeUndefined();
    const hook = await newHook(s, "u_rot2");
    await s.delete("u_rot2", hook.id);
    expect(await s.rotateSecret("u_rot2", hook.id, newSecret(), 1000)).toBeUndefined();
    expect(await redis.exists(keys.webhook("u_rot2", hook.id))).toBe(0);
  });

  it("applies every one of many concurrent rotations and updates: no rotation is lost and no update puts an old secret back", async () => {
    const s = store();
    const hook = await newHook(s, "u_rot3");
    const secrets = Array.from({ length: 10 }, newSecret);
    const names = Array.from({ length: 10 }, (_, i) => `name-${i}`);
    const results = await Promise.all([
      ...secrets.map((secret) => s.rotateSecret("u_rot3", hook.id, secret, 60_000)),
      ...names.map((name) => s.update("u_rot3", hook.id, { name })),
    ]);
    const rotations = results.slice(0, secrets.length) as WebhookRecord[];
    const final = (await s.get("u_rot3", hook.id)) as WebhookRecord;

    // One chain: each rotation replaced a different secret (the original or another rotation's).
    const replaced = rotations.map((r) => r.previous_signing_secret);
    expect(new Set(replaced).size).toBe(secrets.length);
    expect([...replaced, final.signing_secret].sort()).toEqual([hook.signing_secret, ...secrets].sort());
    expect(secrets).toContain(final.signing_secret);
    expect(rotations.find((r) => r.signing_secret === final.signing_secret)?.previous_signing_secret).toBe(final.previous_signing_secret);
    // The updates changed the name only, and each saw the rotations made before it.
    expect(names).toContain(final.name);
    expect(final.url).toBe("https://example.com/hook");
  });
});
