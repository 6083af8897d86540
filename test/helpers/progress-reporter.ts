import type { Reporter, TestModule, TestSpecification } from "vitest/node";

/**
 * A progress count for runs without a terminal (CI logs, `npm test | tee`): after each test file,
 * one line on stderr with the files done out of the total and the time so far. On a terminal
 * vitest's own live summary shows both, so this says nothing there. vitest's closing summary is
 * left as it is (and stays the output's last lines).
 */
export default class ProgressReporter implements Reporter {
  private total = 0;
  private done = 0;
  private failed = 0;
  private started = 0;

  constructor(private readonly enabled: boolean = !process.stdout.isTTY) {}

  onTestRunStart(specifications: ReadonlyArray<TestSpecification>): void {
    this.total = specifications.length;
    this.done = 0;
    this.failed = 0;
    this.started = performance.now();
  }

  onTestModuleEnd(module: TestModule): void {
    this.done++;
    if (module.state() === "failed") this.failed++;
    if (!this.enabled) return;
    const failed = this.failed > 0 ? `, ${this.failed} failed` : "";
    process.stderr.write(`progress: ${this.done}/${this.total} test files${failed}, ${elapsed(performance.now() - this.started)}\n`);
  }
}

function elapsed(ms: number): string {
  const s = Math.floor(ms / 1000);
  return s < 60 ? `${s}s` : `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
}
