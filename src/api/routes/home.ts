import type { Router } from "@koa/router";
import { OPENAPI_PATH } from "./docs.js";

/** The home page is static HTML: nothing to run, nothing loaded from anywhere, not even from here. */
export const HOME_CSP = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

export interface HomeDeps {
  readonly version: string;
  /** The browser console's path, once the daemon serves one: it becomes the page's first link. */
  readonly consolePath?: string;
}

interface Link {
  readonly href: string;
  readonly text: string;
  readonly what: string;
}

const escapeHtml = (s: string) => s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);

/** The page's links, in the order a newcomer needs them. */
export function homeLinks(deps: HomeDeps): Link[] {
  return [
    ...(deps.consolePath ? [{ href: deps.consolePath, text: "Console", what: "sources, webhooks and deliveries in the browser" }] : []),
    { href: "/docs", text: "API reference", what: "every /v1 route, with a form to try it (needs a user's API key)" },
    { href: OPENAPI_PATH, text: "OpenAPI document", what: "the same reference as JSON, for tools" },
    { href: "/healthz", text: "/healthz", what: "liveness: the process answers" },
    { href: "/readyz", text: "/readyz", what: "readiness: Redis answers and the roles run (200 or 503)" },
    { href: "/metrics", text: "/metrics", what: "Prometheus metrics" },
  ];
}

function page(deps: HomeDeps): string {
  const items = homeLinks(deps)
    .map((l) => `    <li><a href="${escapeHtml(l.href)}">${escapeHtml(l.text)}</a>: ${escapeHtml(l.what)}</li>`)
    .join("\n");
  return `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <title>Tributary</title>
</head>
<body>
  <h1>Tributary ${escapeHtml(deps.version)}</h1>
  <p>An event relay speaking the Pipedream REST API v1, under <code>/v1</code>.</p>
  <ul>
${items}
  </ul>
  <p>A user and its API key come from <code>POST /admin/users</code> (with <code>ADMIN_TOKEN</code>) or
  <code>tributary users create --username NAME --email EMAIL</code>.</p>
</body>
</html>
`;
}

/** `GET /`: where things are, for a person who opened the daemon's address. Unauthenticated. */
export function homeRoutes(router: Router, deps: HomeDeps): void {
  const body = page(deps);
  router.get("/", (ctx) => {
    ctx.set("content-security-policy", HOME_CSP);
    ctx.set("x-content-type-options", "nosniff");
    ctx.type = "text/html; charset=utf-8";
    ctx.body = body;
  });
}
