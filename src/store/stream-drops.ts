import type { RedisClient } from "./context.js";
import type { Keys } from "./keys.js";
import { normalizeChannel } from "./keys.js";
import { defineScript, type ScriptCall } from "./script.js";
import { DELETE_STREAM_EVENTS } from "./scripts/delete-stream-events.js";

/**
 * Deleting events from summary streams, each step with its share of the user's storage budget
 * (store/scripts/delete-stream-events.ts): the event store's range deletions and every deletion of
 * an emitter (workflow, webhook, source) go through here, so what they held is given back.
 */
export class StreamDrops {
  private readonly call: ScriptCall;

  constructor(
    private readonly redis: RedisClient,
    private readonly keys: Keys,
  ) {
    this.call = defineScript(redis, DELETE_STREAM_EVENTS);
  }

  /** Deletes the entries from `start` to `end` ("-", "+" for open ends), or the whole stream when both are ""; returns how many went. */
  async drop(userId: string, emitterId: string, channel: string, start: string, end: string): Promise<number> {
    const c = normalizeChannel(channel);
    const keys = [this.keys.events(userId, emitterId, c), this.keys.eventChannels(userId, emitterId), this.keys.storedStreams(userId)];
    return Number(await this.call(keys, [c, `${emitterId}:${c}`, start, end]));
  }

  /**
   * Drops every stream of an emitter, stream by stream, each in one step with its accounting; a
   * stream a record creates meanwhile stays, counted.
   */
  async dropEmitter(userId: string, emitterId: string): Promise<void> {
    const channels = await this.redis.smembers(this.keys.eventChannels(userId, emitterId));
    await Promise.all(channels.map((c) => this.drop(userId, emitterId, c, "", "")));
  }
}
