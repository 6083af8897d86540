import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import type { Router } from "@koa/router";
import { NotFoundError } from "../../domain/errors.js";

/** Where the document is served; the app dispatches this one /v1 path outside the authenticated router. */
export const OPENAPI_PATH = "/v1/openapi.json";

/**
 * The reference page allows no other host: scripts, styles, images, fonts and fetches come from
 * the daemon itself. Swagger UI sets element styles at run time, hence 'unsafe-inline' for styles
 * only (no inline script is served).
 */
export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self' 'unsafe-inline'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

/** The files of swagger-ui-dist the page uses, by the name it asks for them. */
const ASSETS: Readonly<Record<string, string>> = {
  "swagger-ui.css": "text/css; charset=utf-8",
  "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
  "favicon-32x32.png": "image/png",
};

/** Our own start-up script (an external file, so the CSP needs no inline script). */
const INIT_JS = `window.addEventListener("load", function () {
  window.ui = SwaggerUIBundle({
    url: ${JSON.stringify(OPENAPI_PATH)},
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    docExpansion: "list",
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
`;

const PAGE = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Tributary API reference</title>
  <link rel="icon" type="image/png" href="/docs/assets/favicon-32x32.png">
  <link rel="stylesheet" href="/docs/assets/swagger-ui.css">
</head>
<body>
  <noscript>The reference needs JavaScript; the document itself is at <a href="${OPENAPI_PATH}">${OPENAPI_PATH}</a>.</noscript>
  <div id="swagger-ui"></div>
  <script src="/docs/assets/swagger-ui-bundle.js"></script>
  <script src="/docs/assets/init.js"></script>
</body>
</html>
`;

/** swagger-ui-dist's folder, found when first asked (nothing happens at import). */
function assetDir(): string {
  return path.dirname(createRequire(import.meta.url).resolve("swagger-ui-dist/package.json"));
}

export interface DocsRouteDeps {
  /** The OpenAPI document (built once by the caller). */
  readonly document: object;
}

/**
 * `GET /v1/openapi.json`, `GET /docs` and the page's assets: unauthenticated, mounted on the
 * operational router. Asset files are read once, on first request, and kept in memory.
 */
export function docsRoutes(router: Router, deps: DocsRouteDeps): void {
  const documentJson = JSON.stringify(deps.document);
  const cache = new Map<string, Promise<Buffer>>();
  const asset = (name: string): Promise<Buffer> => {
    let file = cache.get(name);
    if (!file) {
      file = readFile(path.join(assetDir(), name));
      cache.set(name, file);
      file.catch(() => cache.delete(name));
    }
    return file;
  };

  router.get(OPENAPI_PATH, (ctx) => {
    ctx.type = "application/json";
    ctx.set("cache-control", "no-cache");
    ctx.body = documentJson;
  });
  router.get("/docs", (ctx) => {
    ctx.type = "text/html; charset=utf-8";
    ctx.set("content-security-policy", DOCS_CSP);
    ctx.set("x-content-type-options", "nosniff");
    ctx.set("referrer-policy", "no-referrer");
    ctx.body = PAGE;
  });
  router.get("/docs/assets/:file", async (ctx) => {
    const name = String(ctx.params.file);
    ctx.set("x-content-type-options", "nosniff");
    ctx.set("cache-control", "public, max-age=3600");
    if (name === "init.js") {
      ctx.type = "text/javascript; charset=utf-8";
      ctx.body = INIT_JS;
      return;
    }
    const type = Object.hasOwn(ASSETS, name) ? ASSETS[name] : undefined;
    if (!type) throw new NotFoundError(`no asset ${name.slice(0, 100)}`, "route_not_found");
    ctx.type = type;
    ctx.body = await asset(name);
  });
}
