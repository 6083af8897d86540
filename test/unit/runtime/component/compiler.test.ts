import type { BuildOptions, OutputFile } from "esbuild";
import { describe, expect, it } from "vitest";
import { AppError, ValidationError } from "../../../../src/domain/errors.js";
import type { EsbuildService } from "../../../../src/runtime/component/compile.js";
import { ComponentCompiler } from "../../../../src/runtime/component/compiler.js";

/**
 * A model of esbuild's service as its JS API behaves (see node_modules/esbuild/lib/main.js): one
 * service per process; a build that crashes it fails every build in flight with "The service was
 * stopped"; later builds fail at once with "The service is no longer running" until stop(), after
 * which the next build starts a new service. Code containing POISON crashes it.
 */
class ModelService implements EsbuildService {
  alive = true;
  stops = 0;
  builds = 0;
  private readonly inFlight = new Set<(err: Error) => void>();

  constructor(private readonly opts: { canStart?: boolean; answers?: boolean } = {}) {}

  build(options: BuildOptions & { write: false }): Promise<{ outputFiles: OutputFile[] }> {
    this.builds++;
    if (this.opts.canStart === false) return Promise.reject(new Error("The service was stopped: spawn esbuild ENOENT"));
    if (!this.alive) return Promise.reject(new Error("The service is no longer running"));
    const code = String(options.stdin?.contents ?? "");
    return new Promise((resolve, reject) => {
      this.inFlight.add(reject);
      if (code.includes("POISON")) {
        this.alive = false;
        for (const fail of this.inFlight) fail(new Error("The service was stopped"));
        this.inFlight.clear();
        return;
      }
      if (this.opts.answers === false) return;
      setImmediate(() => {
        this.inFlight.delete(reject);
        resolve({ outputFiles: [{ path: "<stdout>", contents: new Uint8Array(), hash: "", text: `compiled:${code}` }] });
      });
    });
  }

  async stop(): Promise<void> {
    this.stops++;
    this.alive = true;
  }
}

const opts = { allowedPackages: [] };

describe("ComponentCompiler", () => {
  it("gives 400 to the build that stops the service; the builds it took down succeed on their retry", async () => {
    const service = new ModelService();
    const compiler = new ComponentCompiler(opts, service);
    const innocent = ["a = 1", "b = 2", "c = 3"].map((code) => compiler.compile(code));
    const poison = compiler.compile("POISON");
    await expect(Promise.all(innocent)).resolves.toEqual(["compiled:a = 1", "compiled:b = 2", "compiled:c = 3"]);
    const err = await poison.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).message).toMatch(/could not be compiled: the compiler stopped on it/);
    // And the service runs again for the next compile.
    await expect(compiler.compile("d = 4")).resolves.toBe("compiled:d = 4");
    expect(service.alive).toBe(true);
    expect(await compiler.healthy()).toBe(true);
  });

  it("restarts a service found stopped before compiling", async () => {
    const service = new ModelService();
    service.alive = false;
    const compiler = new ComponentCompiler(opts, service);
    await expect(compiler.compile("a = 1")).resolves.toBe("compiled:a = 1");
    expect(service.stops).toBe(1);
  });

  it("never stops a service that is running", async () => {
    const service = new ModelService();
    const compiler = new ComponentCompiler(opts, service);
    expect(await compiler.healthy()).toBe(true);
    await compiler.compile("a = 1");
    expect(service.stops).toBe(0);
  });

  it("answers 503 and reports unhealthy when the service cannot start", async () => {
    const compiler = new ComponentCompiler(opts, new ModelService({ canStart: false }));
    const err = await compiler.compile("a = 1").then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(AppError);
    expect((err as AppError).status).toBe(503);
    expect(await compiler.healthy()).toBe(false);
  });

  it("reports unhealthy, and answers 503, when the service does not answer in time", async () => {
    const compiler = new ComponentCompiler(opts, new ModelService({ answers: false }), 50);
    expect(await compiler.healthy(50)).toBe(false);
    const err = await compiler.compile("a = 1").then(
      () => undefined,
      (e: unknown) => e,
    );
    expect((err as AppError).status).toBe(503);
  });

  it("refuses deeply nested code before it reaches the service", async () => {
    const service = new ModelService();
    const compiler = new ComponentCompiler(opts, service);
    await expect(compiler.compile(`x = ${"[".repeat(5000)}${"]".repeat(5000)}`)).rejects.toThrow(/nests brackets more than 1000 levels/);
    expect(service.builds).toBe(0);
  });
});
