import { UnavailableError, ValidationError } from "../../domain/errors.js";
import { type CompileOptions, compileComponent, type EsbuildService, esbuildService, isServiceStopped } from "./compile.js";

/**
 * compileComponent with the esbuild service kept alive across hostile code.
 *
 * esbuild runs every build of the process in one service process. Code that crashes it (a parser
 * stack overflow: hundreds of thousands of nested or chained expressions) fails its own build and
 * every build in flight with it, and every later build too, until the service is stopped and a new
 * one started. So when a build sees the service gone, the compiler restarts it and tries that
 * build once more, with the other retries queued behind it. A build that stops the fresh service as
 * well is the culprit and gets a 400; the builds that merely shared its service succeed on their
 * retry. If a trivial build then fails too, the compiler itself is broken: 503, and `healthy()`
 * (which readiness uses) says so.
 *
 * New compiles do not wait for the retries: making everyone wait behind a crashing retry (seconds
 * each) would hand whoever sends crashing code a way to stall every compile. The price is that a
 * retry which overlaps another crashing first attempt may be blamed for it.
 */

/** A trivial component, for health checks. */
const PROBE_CODE = "module.exports = {};";
/** How long a health check waits for the trivial build. */
export const PROBE_TIMEOUT_MS = 2000;
/**
 * How long one build may take. Half a megabyte of ordinary code takes a few seconds on a busy
 * host; the bound is there so a build that never answers cannot hold a request (or, through the
 * retry queue, every later compile) forever.
 */
export const BUILD_TIMEOUT_MS = 60_000;

export class ComponentCompiler {
  /** The chain of retries; each runs after the previous one settles. */
  private retries: Promise<void> = Promise.resolve();

  constructor(
    private readonly opts: CompileOptions,
    private readonly service: EsbuildService = esbuildService,
    private readonly buildTimeoutMs = BUILD_TIMEOUT_MS,
  ) {}

  /** Compiles component source for the sandbox; throws ValidationError (400) for bad code. */
  async compile(code: string): Promise<string> {
    try {
      return await this.build(code);
    } catch (err) {
      if (!isServiceStopped(err)) throw err;
    }
    return this.retryAlone(code);
  }

  /** True when a trivial build succeeds in time, after restarting a service found stopped. */
  healthy(timeoutMs = PROBE_TIMEOUT_MS): Promise<boolean> {
    return withDeadline(this.probe(), timeoutMs, () => false);
  }

  private build(code: string): Promise<string> {
    return withDeadline(compileComponent(code, this.opts, this.service), this.buildTimeoutMs, () => {
      throw new UnavailableError(`the component compiler did not finish within ${this.buildTimeoutMs / 1000} s`);
    });
  }

  private retryAlone(code: string): Promise<string> {
    const attempt = this.retries.then(async () => {
      await this.restartIfStopped();
      try {
        return await this.build(code);
      } catch (err) {
        if (!isServiceStopped(err)) throw err;
        if (await this.probe()) {
          throw new ValidationError("component_code could not be compiled: the compiler stopped on it (is it nested too deeply?)");
        }
        throw new UnavailableError("the component compiler is not available");
      }
    });
    this.retries = attempt.then(
      () => {},
      () => {},
    );
    return attempt;
  }

  private async probe(): Promise<boolean> {
    await this.restartIfStopped();
    try {
      await compileComponent(PROBE_CODE, this.opts, this.service);
      return true;
    } catch {
      return false;
    }
  }

  /**
   * Stops the esbuild service if it has stopped running, so the next build starts a new one.
   * Only a dead service may be stopped: esbuild never settles the builds in flight on a service
   * that `stop()` ends. A build on a dead service fails at once, so an empty build tells.
   */
  private async restartIfStopped(): Promise<void> {
    try {
      await this.service.build({ stdin: { contents: "" }, write: false, logLevel: "silent" });
    } catch (err) {
      if (isServiceStopped(err)) await this.service.stop();
    }
  }
}

/** `promise`, or what `onTimeout` returns (or throws) once `ms` pass first. */
async function withDeadline<T>(promise: Promise<T>, ms: number, onTimeout: () => T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<T>((resolve, reject) => {
    timer = setTimeout(() => {
      try {
        resolve(onTimeout());
      } catch (err) {
        reject(err);
      }
    }, ms);
    timer.unref();
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}
