/** Who waits for a run slot: a run read from the run stream, or a BullMQ source-run job (queued by an earlier version). */
export type SlotClaimant = "stream" | "queue";

/**
 * The source runs of a worker process at once (SOURCE_RUN_CONCURRENCY), shared by the run stream's
 * consumer and the BullMQ source-run worker (jobs queued before the run stream, during a rolling
 * upgrade). A freed slot goes to a waiting stream run, except that a waiting BullMQ job gets at
 * least one in every `streamPerQueue + 1`: stream runs come first without starving the jobs. FIFO
 * within each kind.
 */
export class RunSlots {
  private free: number;
  private readonly waiting: Record<SlotClaimant, Array<() => void>> = { stream: [], queue: [] };
  /** Stream runs granted in a row while a BullMQ job waited. */
  private streak = 0;

  constructor(
    readonly size: number,
    private readonly streamPerQueue = 3,
  ) {
    this.free = size;
  }

  /** Slots free right now. */
  available(): number {
    return this.free;
  }

  /** Waits for a slot; `release()` it once when the run ends. */
  take(who: SlotClaimant): Promise<void> {
    if (this.free > 0) {
      this.free--;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => this.waiting[who].push(resolve));
  }

  /** Gives a slot back: it passes to the next waiter, if any. */
  release(): void {
    const next = this.next();
    if (next) next();
    else this.free++;
  }

  private next(): (() => void) | undefined {
    const { stream, queue } = this.waiting;
    if (stream.length > 0 && (queue.length === 0 || this.streak < this.streamPerQueue)) {
      if (queue.length > 0) this.streak++;
      return stream.shift();
    }
    this.streak = 0;
    return queue.shift();
  }
}
