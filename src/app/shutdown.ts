import type { Logger } from "../observability/logger.js";

/**
 * The shutdown order (SPEC §7, STYLE): stop accepting HTTP, drain workers with a deadline, release
 * what the workers used, close queues, quit Redis.
 */
export const SHUTDOWN_PHASES = ["http", "workers", "resources", "queues", "redis"] as const;
export type ShutdownPhase = (typeof SHUTDOWN_PHASES)[number];

interface Step {
  readonly phase: ShutdownPhase;
  readonly name: string;
  readonly run: () => unknown;
}

/**
 * Named shutdown steps, registered as parts are opened and run in the written phase order (the
 * steps of one phase together, each bounded by the deadline). A start that fails runs it too, so
 * it closes exactly what was opened before the failure.
 */
export class Shutdown {
  private readonly steps: Step[] = [];
  private running?: Promise<void>;

  constructor(
    private readonly timeoutMs: number,
    private readonly logger: Logger,
  ) {}

  on(phase: ShutdownPhase, name: string, run: () => unknown): void {
    this.steps.push({ phase, name, run });
  }

  /** The names of the registered steps, in the order they run. */
  plan(): string[] {
    return SHUTDOWN_PHASES.flatMap((phase) => this.steps.filter((s) => s.phase === phase).map((s) => `${phase}:${s.name}`));
  }

  /** Runs every step once; later calls return the same promise. */
  run(): Promise<void> {
    this.running ??= (async () => {
      for (const phase of SHUTDOWN_PHASES) {
        await Promise.all(this.steps.filter((s) => s.phase === phase).map((s) => this.bounded(s)));
      }
    })();
    return this.running;
  }

  private async bounded(step: Step): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        this.logger.warn({ step: step.name, timeoutMs: this.timeoutMs }, "shutdown step timed out");
        resolve();
      }, this.timeoutMs);
      timer.unref();
    });
    try {
      await Promise.race([Promise.resolve().then(step.run), late]);
    } catch (err) {
      this.logger.warn({ err, step: step.name }, "shutdown step failed");
    } finally {
      clearTimeout(timer);
    }
  }
}
