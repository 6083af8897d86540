import type { PropDefinition } from "./props.js";

/** What a component declares, read from its code in the sandbox (SPEC §2 "Components"). */
export type Dedupe = "unique" | "greatest" | "last";

export interface ComponentMeta {
  key: string | null;
  /** Falls back to `key` when the component has no name. */
  name: string;
  /** "0.0.1" when the component declares none (Pipedream's own starting version). */
  version: string;
  description: string | null;
  dedupe: Dedupe | null;
  props: PropDefinition[];
  /** Hooks present among deploy, activate, deactivate. */
  hooks: string[];
  hasRun: boolean;
}
