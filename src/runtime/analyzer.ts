import type { Config } from "../config/schema.js";
import type { ComponentAnalyzer } from "../services/component-analyzer.js";
import { loadComponent } from "./component/meta.js";

/** The management API's view of the sandbox: compile the code, then read its metadata in an isolate. */
export function createAnalyzer(config: Config): ComponentAnalyzer {
  return {
    async analyze(code: string) {
      const { meta, compiledCode } = await loadComponent(code, {
        allowedPackages: config.sandboxAllowedPackages,
        memoryMb: Math.min(config.sandboxMemoryMb, 64),
      });
      return { meta, compiled: compiledCode };
    },
  };
}
