import { Redis, type RedisOptions } from "ioredis";

/** How long a Sentinel client that ended on its own waits before it connects again. */
const REVIVE_DELAY_MS = 200;

/**
 * A Redis client of a Sentinel master group that does not stay closed after ioredis's failover
 * race (docs/decisions.md "Sentinel: a client ended by its own failover detector").
 *
 * ioredis (5.11) asks a sentinel for the master at every reconnection. If the sentinels announce
 * the failover (`+switch-master`, seen by the previous connection's failover detector) while
 * that question is still in flight, the detector disconnects the connector, the pending
 * reconnection then fails with "Connection is closed.", and the client sets its status to `end`:
 * from there every command fails at once, forever, although a new master is serving. A lost
 * master makes that race likely on a loaded machine (the sentinel answers slowly just when the
 * announcement comes).
 *
 * So an `end` this process did not ask for (`disconnect()` or `quit()`) connects again after a
 * short delay. `duplicate()` (BullMQ's blocking connections) gives a client of the same kind.
 */
export class SentinelRedis extends Redis {
  private closedByCaller = false;

  constructor(options: RedisOptions) {
    super(options);
    this.on("end", () => {
      if (this.closedByCaller) return;
      setTimeout(() => {
        if (!this.closedByCaller && this.status === "end") this.connect().catch(() => {});
      }, REVIVE_DELAY_MS).unref();
    });
  }

  override disconnect(reconnect = false): void {
    if (!reconnect) this.closedByCaller = true;
    super.disconnect(reconnect);
  }

  override quit(...args: Parameters<Redis["quit"]>): ReturnType<Redis["quit"]> {
    this.closedByCaller = true;
    return super.quit(...args);
  }

  override duplicate(override?: Partial<RedisOptions>): SentinelRedis {
    return new SentinelRedis({ ...this.options, ...override });
  }
}
