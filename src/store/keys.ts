import { DEFAULT_OUTBOX_SHARDS } from "../domain/shards.js";
import { shardOf, shardTags } from "./shard-layout.js";

/**
 * The only place that knows Redis key names, and what hash tag each carries (SPEC §8):
 * - **a user's data**: `<prefix>:{<shard tag>}:<user id>:...`, the tag of the user's shard
 *   (`store/shard-layout.ts`), so each multi-key atomic step of a user stays in one slot, and the
 *   record step can append to the shard's outbox in the same script;
 * - **a shard's streams**: `<prefix>:{<shard tag>}:outbox`, in the slot of its users;
 * - **global lookups** (API key hash -> user, endpoint token -> source, the user list, timers and
 *   leases): small, single-key steps or one-slot steps under the `{<prefix>}` tag;
 * - **BullMQ queues**: one tag per queue name (`queuePrefix`), so no one node carries them all.
 * Until layout 2 (the shard tags), a user's keys were `<prefix>:{<user id>}:...` and there was one
 * outbox under the global tag: `legacy*` name them for the migration (store/layout-migration.ts).
 */
export type Keys = ReturnType<typeof createKeys>;

export { DEFAULT_OUTBOX_SHARDS };

/** The message on `keys.listenerChanges()`: one webhook, workflow or source, or every one of the user (`*`). */
export function listenerChangeMessage(userId: string, id: string | "*"): string {
  return `${userId} ${id}`;
}

/** Channel names as stored: "" and "default" are the same default channel. */
export function normalizeChannel(name: string | undefined | null): string {
  return !name || name === "default" ? "" : name;
}

/** A literal for a SCAN pattern: its glob characters escaped. */
function globEscape(text: string): string {
  return text.replace(/[*?[\]\\]/g, "\\$&");
}

/** Users whose shard and key base `createKeys` keeps (then it starts over): far more than one process serves at once. */
const MAX_CACHED_USERS = 10_000;

export function createKeys(prefix: string, shards: number = DEFAULT_OUTBOX_SHARDS) {
  const g = `${prefix}:{${prefix}}`;
  const tags = shardTags(prefix, shards);
  const shardKey = (shard: number) => `${prefix}:{${tags[shard]}}`;
  // A user's shard and what every key of the user starts with, kept per user: an emit builds seven
  // keys of its user, and hashing the id to its shard and joining the prefix each time cost more
  // than the rest of them (about 1.1 of 1.8 µs per emit's keys).
  // The ingress bucket's key is kept too: every emit names it, and the record step's targets
  // (store/record-targets.ts) compare it with the one they were built with, which is instant for
  // the same string and a copy and compare for an equal one.
  const users = new Map<string, { readonly shard: number; readonly base: string; readonly ingressRate: string }>();
  const userOf = (userId: string) => {
    let user = users.get(userId);
    if (user === undefined) {
      if (users.size >= MAX_CACHED_USERS) users.clear();
      const shard = shardOf(userId, shards);
      const base = `${shardKey(shard)}:${userId}`;
      user = { shard, base, ingressRate: `${base}:ingress-rate` };
      users.set(userId, user);
    }
    return user;
  };
  const u = (userId: string): string => userOf(userId).base;
  return {
    prefix,
    /** OUTBOX_SHARDS: how many shards (each with its outbox stream and hash tag) the key space has. */
    shards,
    /** The hash tag of each shard, by shard number. */
    shardTags: tags,
    /** The shard a user's data lives in. */
    shardOf: (userId: string) => userOf(userId).shard,
    /** hash: the deployment's layout (`version`, `outbox_shards`), written at first start and checked at every start */
    layout: () => `${g}:layout`,
    /** string: the lock of the one process migrating layout 1 to layout 2 (store/layout.ts); expires */
    layoutLock: () => `${g}:layout:lock`,
    /** SCAN pattern of every key under a user's hash tag (all of the user's data). */
    userPattern: (userId: string) => `${u(userId)}:*`,
    /** What every key of a user starts with (then `:`): `<prefix>:{<shard tag>}:<user id>`. */
    userKeyBase: (userId: string) => u(userId),
    /**
     * BullMQ prefix of a queue: each queue name has its own hash tag (BullMQ needs a queue's keys
     * in one slot; SPEC §8 wants queues spread). The delivery queue keeps layout 1's `{bull}`, so
     * retries already queued (some hours out) stay where workers look; the others moved.
     */
    queuePrefix: (queue: "delivery" | "source-run" | "maintenance" | "timers") =>
      queue === "delivery" ? `${prefix}:{bull}` : `${prefix}:{bull.${queue}}`,
    /** Layout 1's prefix of every BullMQ queue (store/layout-migration.ts moves the others' jobs). */
    legacyBullPrefix: `${prefix}:{bull}`,

    // ---- global ----
    /** hash: sha256(api key) -> user id */
    apiKeys: () => `${g}:apikeys`,
    /**
     * hash: user id -> "<sha256 of the current API key> <its last four characters>": the key state,
     * in the tag of `apiKeys` so a rotation is one atomic step (users written before it keep the
     * state in their record: store/users.ts reads it there when this has none)
     */
    apiKeyOf: () => `${g}:apikey-of`,
    /** pub/sub channel: digests of API keys that stopped working (auth caches drop them) */
    apiKeyRevocations: () => `${g}:apikeys:revoked`,
    /**
     * pub/sub channel: "<user id> <webhook, workflow or source id>" (or "<user id> *") after a
     * listener's or source's record changed (listener and source caches drop it); see listenerChangeMessage
     */
    listenerChanges: () => `${g}:listeners:changed`,
    /** zset: user ids by creation time */
    users: () => `${g}:users`,
    /** hash: username -> user id (uniqueness) */
    usernames: () => `${g}:usernames`,
    /** hash: HTTP endpoint token -> "<user id> <source id>" */
    endpoints: () => `${g}:endpoints`,
    /** string: "<user id> <source id>" of a live-tail browser token, by sha256(token); expires with it */
    tailToken: (tokenHash: string) => `${g}:sse-token:${tokenHash}`,

    // ---- per user ----
    user: (userId: string) => `${u(userId)}:user`,
    usage: (userId: string, day: string) => `${u(userId)}:usage:${day}`,
    billingUsage: (userId: string, periodStart: number) => `${u(userId)}:billing:${periodStart}`,

    components: (userId: string) => `${u(userId)}:components`,
    component: (userId: string, id: string) => `${u(userId)}:component:${id}`,
    componentCompiled: (userId: string, id: string) => `${u(userId)}:component:${id}:compiled`,
    componentsByHash: (userId: string) => `${u(userId)}:components:byhash`,
    componentsByKey: (userId: string) => `${u(userId)}:components:bykey`,
    /** hash: component id -> bytes it stores (record + compiled bundle), for the component_bytes limit */
    componentSizes: (userId: string) => `${u(userId)}:components:bytes`,

    sources: (userId: string) => `${u(userId)}:sources`,
    source: (userId: string, id: string) => `${u(userId)}:source:${id}`,
    sourceSlugs: (userId: string) => `${u(userId)}:sources:slugs`,
    sourceDb: (userId: string, id: string) => `${u(userId)}:db:${id}`,
    sourceDedupe: (userId: string, id: string) => `${u(userId)}:dedupe:${id}`,
    /** token bucket of a source's HTTP endpoint */
    sourceRate: (userId: string, id: string) => `${u(userId)}:rate:${id}`,
    /** the user's source runs queued and not yet finished (store/run-backlog.ts: their BullMQ priority) */
    runBacklog: (userId: string) => `${u(userId)}:run-backlog`,
    /** token bucket of the user's ingress (workflow emits and HTTP source requests) */
    ingressRate: (userId: string) => userOf(userId).ingressRate,

    webhooks: (userId: string) => `${u(userId)}:webhooks`,
    webhook: (userId: string, id: string) => `${u(userId)}:webhook:${id}`,
    /** hash: the start schedule of a webhook's rate_limit_per_second (store/scripts/webhook-slot.ts), shared by every worker process */
    webhookRate: (userId: string, id: string) => `${u(userId)}:webhook-rate:${id}`,
    /** zset: a webhook's reserved start slots (token by slot ms), beside its schedule */
    webhookRateSlots: (userId: string, id: string) => `${u(userId)}:webhook-rate-slots:${id}`,
    /** hash: a webhook's circuit breaker (store/circuit.ts), shared by every worker process; absent = closed */
    webhookCircuit: (userId: string, id: string) => `${u(userId)}:webhook-circuit:${id}`,
    /** zset: job ids of deliveries waiting on a webhook's open circuit, released when it closes */
    webhookCircuitWaiting: (userId: string, id: string) => `${u(userId)}:webhook-circuit-waiting:${id}`,

    workflows: (userId: string) => `${u(userId)}:workflows`,
    workflow: (userId: string, id: string) => `${u(userId)}:workflow:${id}`,

    /** hash: subscription id -> JSON {id, emitter_id, listener_id, event_name} */
    subscriptions: (userId: string) => `${u(userId)}:subs`,
    /** zset: subscription ids by creation time (list order) */
    subscriptionOrder: (userId: string) => `${u(userId)}:subs:order`,
    /** hash: "emitter\nlistener\nevent_name" -> subscription id (idempotency) */
    subscriptionTriples: (userId: string) => `${u(userId)}:subs:triples`,
    /** set: subscription ids whose emitter is `emitter` (an id or a glob) and channel is `channel` */
    subscriptionIndex: (userId: string, emitter: string, channel: string) =>
      `${u(userId)}:subs:idx:${emitter}:${encodeURIComponent(normalizeChannel(channel))}`,
    /** hash: listener id -> events its subscriptions' filters kept from it; "<listener id>:last" -> "<event id> <ms>" of the latest */
    listenerFiltered: (userId: string) => `${u(userId)}:subs:filtered`,
    /** hash: auto-subscription id -> JSON */
    autoSubscriptions: (userId: string) => `${u(userId)}:asubs`,

    /** stream: the latest 100 events of one (emitter, channel) */
    events: (userId: string, emitterId: string, channel: string) =>
      `${u(userId)}:events:${emitterId}:c:${encodeURIComponent(normalizeChannel(channel))}`,
    /** set: channels (normalized, raw) that have an event stream for an emitter, for deletion */
    eventChannels: (userId: string, emitterId: string) => `${u(userId)}:events:${emitterId}:channels-set`,

    /**
     * hash: what the user's event streams hold, for MAX_STREAMS_PER_USER and MAX_STORED_MB_PER_USER:
     * `<emitter id>:<channel>` -> bytes of that stream's events, one field per stream, and `bytes`
     * -> their sum (a stream's field always has a colon; store/scripts/record-events.ts keeps it)
     */
    storedStreams: (userId: string) => `${u(userId)}:stored-streams`,

    /** zset: the user's open live-tail streams (any process) by the time their process last vouched for them */
    tailStreams: (userId: string) => `${u(userId)}:sse:streams`,

    /** zset: delivery ids of a webhook by creation time (attempt log) */
    deliveries: (userId: string, webhookId: string) => `${u(userId)}:deliveries:${webhookId}`,
    delivery: (userId: string, id: string) => `${u(userId)}:delivery:${id}`,
    /**
     * hash: one event's payload (`p`), stored once for all of its deliveries that may still send
     * it, with one field per such delivery id (store/payloads.ts); gone with the last of them
     */
    payload: (userId: string, emitterId: string, channel: string, eventId: string) =>
      `${u(userId)}:payload:${emitterId}:${encodeURIComponent(normalizeChannel(channel))}:${eventId}`,
    /** SCAN pattern of the payload keys of one (emitter, channel): the event id follows it */
    payloadPattern: (userId: string, emitterId: string, channel: string) =>
      `${globEscape(`${u(userId)}:payload:${emitterId}:${encodeURIComponent(normalizeChannel(channel))}:`)}*`,

    /** hash: a bulk replay (store/replays.ts): its webhook, selectors, counters and cursor; expires */
    replay: (userId: string, id: string) => `${u(userId)}:replay:${id}`,
    /** list: the delivery ids a bulk replay matched, in the order it queues them; expires with it */
    replayPlan: (userId: string, id: string) => `${u(userId)}:replay:${id}:plan`,
    /** set: delivery ids of a bulk replay that settled as `outcome`; expires with it */
    replayOutcome: (userId: string, id: string, outcome: "delivered" | "failed") => `${u(userId)}:replay:${id}:${outcome}`,
    /** zset: the user's bulk replays still queueing (replay ids by creation time, ms), taken oldest first at each of the user's turns */
    userReplaysQueueing: (userId: string) => `${u(userId)}:replays-queueing`,
    /** string: the id of the replay of these selectors still queueing (identical requests find it) */
    replayRunning: (userId: string, webhookId: string, identity: string) =>
      `${u(userId)}:replay-running:${webhookId}:${encodeURIComponent(identity)}`,

    /** stream: shard `shard`'s outbox, in its users' slot (the record script appends to it; fan-out reads it through a consumer group) */
    shardOutbox: (shard: number) => `${shardKey(shard)}:outbox`,
    /** stream: the outbox of a user's shard */
    outboxOf: (userId: string) => `${shardKey(userOf(userId).shard)}:outbox`,
    /** Layout 1's single outbox stream, under the global tag (drained by the migration) */
    legacyOutbox: () => `${g}:outbox`,
    /** Layout 1's prefix of a user's keys, `<prefix>:{<user id>}` (every key of the user starts with it and `:`) */
    legacyUserKey: (userId: string) => `${prefix}:{${userId}}`,
    /** stream: "reconcile this source's timer" requests for the scheduler role */
    timerControl: () => `${g}:timers:control`,
    /** zset: "<user id> <webhook id>" of every webhook whose circuit is open, by opening time (the open-circuits gauge) */
    openCircuits: () => `${g}:circuits:open`,
    /** pub/sub channel: "<user id> <webhook id>" when a webhook's circuit stops being clean (its first failure) */
    circuitChanges: () => `${g}:circuits:changed`,
    /** string: the scheduler role's leadership lock */
    schedulerLock: () => `${g}:timers:lock`,
    /** zset: "<user id> <replay id>" of bulk replays still queueing, by creation time (ms): the previous version's registry, moved into the next two by the driver */
    replaysQueueing: () => `${g}:replays`,
    /** zset: user ids with bulk replays still queueing, by the time of their last turn at the replay rate (ms): least recently served first */
    replayTurns: () => `${g}:replays:turns`,
    /** string: the lock of the one process that drives bulk replays */
    replayLease: () => `${g}:replays:lease`,
    /**
     * stream: shard `shard`'s source runs accepted and not yet settled, in its users' slot (an HTTP
     * source request admits and adds its run in one script), read by run consumers through a group
     * (store/run-stream.ts)
     */
    shardRuns: (shard: number) => `${shardKey(shard)}:runs`,
    /** hash: user id -> that user's entries in its shard's run stream (at most SOURCE_RUN_STREAM_PER_USER; past it runs are parked) */
    shardRunCounts: (shard: number) => `${shardKey(shard)}:runs:counts`,
    /** hash: "<user id> <seq>" -> job JSON of a run parked until its user has room in its shard's run stream */
    shardRunParked: (shard: number) => `${shardKey(shard)}:runs:parked`,
    /** hash: "h <user id>" / "t <user id>" -> seq of the user's first parked run - 1 / of its last */
    shardRunParkedEnds: (shard: number) => `${shardKey(shard)}:runs:parked:ends`,
    /** zset: ids of runs put in the shard's run stream (fan-out, timer ticks) -> expiry ms: a redo adds none twice */
    shardRunOnce: (shard: number) => `${shardKey(shard)}:runs:once`,
    /** Until the run streams were sharded: the one run stream under the global tag (store/run-stream.ts adopts what it holds) */
    legacyRunStream: () => `${g}:runs`,
    /** ... its per-user counts */
    legacyRunStreamCounts: () => `${g}:runs:counts`,
    /** ... its parked runs */
    legacyRunParked: () => `${g}:runs:parked`,
    /** ... its parked runs' ends */
    legacyRunParkedEnds: () => `${g}:runs:parked:ends`,
    /** ... its ids of runs taken */
    legacyRunStreamOnce: () => `${g}:runs:once`,
  };
}
