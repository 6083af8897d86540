import type { PropDefinition } from "../domain/props.js";

/** What the sandbox tells about a component's code (read inside an isolate, never in our realm). */
export interface ComponentMeta {
  key: string | null;
  name: string;
  version: string;
  description: string | null;
  dedupe: "unique" | "greatest" | "last" | null;
  props: PropDefinition[];
  hooks: string[];
  hasRun: boolean;
}

/** The seam between the management API and the sandbox. */
export interface ComponentAnalyzer {
  /** Compiles and inspects code; throws ValidationError (400) when it is not a component. */
  analyze(code: string): Promise<{ meta: ComponentMeta; compiled: string }>;
}

/** Fetches code from a component_url; throws ValidationError naming component_url on failure. */
export interface ComponentFetcher {
  fetch(url: string): Promise<string>;
}
