/**
 * `@pipedream/platform` as Tributary provides it: not the npm package (which pulls in Node's
 * http stack) but a small module bundled into the component and run inside the sandbox, where
 * its `axios` speaks through the sandbox's `fetch` bridge (so it obeys the same SSRF guard, size
 * and time limits as any other fetch). The source below is guest code: plain JavaScript that
 * esbuild bundles; it only uses what the sandbox prelude provides (`fetch`, `btoa`).
 */

export const PLATFORM_PACKAGE = "@pipedream/platform";

export const PLATFORM_SHIM_SOURCE = String.raw`
/** Pipedream's default interval for polling sources, in seconds. */
export const DEFAULT_POLLING_SOURCE_TIMER_INTERVAL = 15 * 60;

/** Thrown by components for a misconfiguration the user must fix; shown as the run's error. */
export class ConfigurationError extends Error {
  constructor(message) {
    super(message);
    this.name = "ConfigurationError";
  }
}

function serializeParams(params) {
  if (params === undefined || params === null) return "";
  if (typeof params === "string") return params.replace(/^\?/, "");
  const parts = [];
  for (const key of Object.keys(params)) {
    const value = params[key];
    if (value === undefined || value === null) continue;
    for (const item of Array.isArray(value) ? value : [value]) {
      const text = item instanceof Date ? item.toISOString() : typeof item === "object" ? JSON.stringify(item) : String(item);
      parts.push(encodeURIComponent(key) + "=" + encodeURIComponent(text));
    }
  }
  return parts.join("&");
}

function buildUrl(config) {
  let url = String(config.url || "");
  if (config.baseURL && !/^[a-z][a-z0-9+.-]*:\/\//i.test(url)) {
    url = String(config.baseURL).replace(/\/+$/, "") + (url ? "/" + url.replace(/^\/+/, "") : "");
  }
  const query = serializeParams(config.params);
  return query ? url + (url.includes("?") ? "&" : "?") + query : url;
}

/**
 * axios($, config) as in Pipedream: resolves with the response data (or the whole response with
 * returnFullResponse), rejects with an error carrying .response for statuses validateStatus refuses.
 * axios(config) works too.
 */
export async function axios($, config) {
  if (config === undefined) config = $;
  config = config || {};
  const headers = {};
  for (const key of Object.keys(config.headers || {})) {
    const value = config.headers[key];
    if (value !== undefined && value !== null) headers[key] = String(value);
  }
  const has = (name) => Object.keys(headers).some((k) => k.toLowerCase() === name);
  let body = config.data;
  if (body !== undefined && body !== null && typeof body !== "string" && !(body instanceof Uint8Array) && !(body instanceof ArrayBuffer)) {
    body = JSON.stringify(body);
    if (!has("content-type")) headers["Content-Type"] = "application/json";
  }
  if (config.auth && !has("authorization")) {
    headers.Authorization = "Basic " + btoa((config.auth.username || "") + ":" + (config.auth.password || ""));
  }
  if (!has("accept")) headers.Accept = "application/json, text/plain, */*";
  const res = await fetch(buildUrl(config), { method: String(config.method || "GET").toUpperCase(), headers, body });
  const text = await res.text();
  let data = text;
  if (config.responseType !== "text" && text !== "") {
    try {
      data = JSON.parse(text);
    } catch {
      data = text;
    }
  }
  const response = { status: res.status, statusText: res.statusText, headers: Object.fromEntries(res.headers.entries()), data, config };
  const validate = config.validateStatus === undefined ? (s) => s >= 200 && s < 300 : config.validateStatus;
  if (validate && !validate(res.status)) {
    const err = new Error("Request failed with status code " + res.status);
    err.name = "AxiosError";
    err.code = res.status >= 500 ? "ERR_BAD_RESPONSE" : "ERR_BAD_REQUEST";
    err.status = res.status;
    err.response = response;
    throw err;
  }
  return config.returnFullResponse ? response : data;
}

export default { axios, ConfigurationError, DEFAULT_POLLING_SOURCE_TIMER_INTERVAL };
`;
