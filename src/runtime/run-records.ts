import type { RunComponent, SourceCache } from "../store/source-cache.js";
import type { EndpointTarget, SourceRecord, SourceStore } from "../store/sources.js";
import type { ComponentCatalog } from "./ports.js";

/**
 * What HTTP source requests and source runs read about a source: its endpoint token's target, the
 * source and its component, from the daemon's source cache (store/source-cache.ts) when it has
 * one, else from Redis each time.
 */
export class RunRecords {
  constructor(
    private readonly sources: SourceStore,
    private readonly components: ComponentCatalog,
    private readonly cache?: SourceCache,
  ) {}

  source(userId: string, id: string): Promise<SourceRecord | undefined> {
    return this.cache ? this.cache.get(userId, id) : this.sources.get(userId, id);
  }

  endpoint(token: string): Promise<EndpointTarget | undefined> {
    return this.cache ? this.cache.endpoint(token) : this.sources.endpoint(token);
  }

  /** The component, or NotFoundError. */
  component(userId: string, id: string): Promise<RunComponent> {
    const load = () => this.components.require(userId, id);
    return this.cache ? this.cache.component(userId, id, load) : load();
  }
}
