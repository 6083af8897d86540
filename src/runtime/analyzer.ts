import type { Config } from "../config/schema.js";
import type { ComponentMeta } from "../domain/component-meta.js";
import { ComponentCompiler } from "./component/compiler.js";
import { createMetaSandbox, loadComponent } from "./component/meta.js";
import type { SandboxCrash } from "./sandbox/process-sandbox.js";

/** The analyzer with the parts its owner needs: a health check for readiness, and close. */
export interface Analyzer {
  /** Compiles and inspects code; throws ValidationError (400) when it is not a component. */
  analyze(code: string): Promise<{ meta: ComponentMeta; compiled: string }>;
  /** False while the component compiler cannot compile a trivial component. */
  healthy(): Promise<boolean>;
  /** Disposes the metadata sandbox's isolates. */
  close(): void;
}

/** The management API's view of the sandbox: compile the code, then read its metadata in an isolate. */
export function createAnalyzer(config: Config, onSandboxCrash?: (crash: SandboxCrash) => void): Analyzer {
  const compiler = new ComponentCompiler({ allowedPackages: config.sandboxAllowedPackages });
  const sandbox = createMetaSandbox(Math.min(config.sandboxMemoryMb, 64), onSandboxCrash);
  return {
    async analyze(code: string) {
      const { meta, compiledCode } = await loadComponent(code, { compiler, sandbox });
      return { meta, compiled: compiledCode };
    },
    healthy: () => compiler.healthy(),
    close: () => sandbox.close(),
  };
}
