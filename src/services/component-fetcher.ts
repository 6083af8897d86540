import type { Agent } from "undici";
import { ValidationError } from "../domain/errors.js";
import { isHttpUrl, rawComponentUrl } from "../domain/url-rules.js";
import { guardedFetchText } from "../net/fetch-text.js";
import type { ComponentFetcher } from "./component-analyzer.js";

/** Fetches component code over HTTP(S): GitHub blob URLs rewritten to raw, size- and SSRF-guarded. */
export function createComponentFetcher(opts: { agent: Agent; timeoutMs: number; maxBytes: number }): ComponentFetcher {
  return {
    async fetch(url: string): Promise<string> {
      if (url.length > 2048 || !isHttpUrl(url)) throw new ValidationError("component_url must be an http(s) URL");
      try {
        const res = await guardedFetchText(rawComponentUrl(url), { agent: opts.agent, timeoutMs: opts.timeoutMs, maxBytes: opts.maxBytes });
        if (res.status < 200 || res.status >= 300) throw new ValidationError(`component_url answered HTTP ${res.status}`);
        return res.text;
      } catch (err) {
        if (err instanceof ValidationError) throw err;
        throw new ValidationError(`component_url could not be fetched: ${(err as Error).message}`);
      }
    },
  };
}
