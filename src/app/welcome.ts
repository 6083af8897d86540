import type { Config } from "../config/schema.js";

/**
 * The start's one line for a person: the address to open and how to make the first user (the
 * admin API when ADMIN_TOKEN is set, else the CLI, which needs no token).
 */
export function welcomeLine(
  config: Pick<Config, "host" | "port" | "publicUrl" | "adminToken">,
  boundPort: number,
): { url: string; msg: string } {
  const url = openUrl(config, boundPort);
  const user = '{"username":"me","email":"me@example.com"}';
  const create = config.adminToken
    ? `curl -X POST ${url}/admin/users -H "Authorization: Bearer $ADMIN_TOKEN" -H 'content-type: application/json' -d '${user}'`
    : "npm run cli -- users create --username me --email me@example.com (or set ADMIN_TOKEN to use the admin API)";
  return { url, msg: `tributary listening on ${url}: open ${url}/ (API reference at ${url}/docs); create a user: ${create}` };
}

/** PUBLIC_URL when it was set; else this host's loopback address (for a wildcard bind) and the bound port. */
function openUrl(config: Pick<Config, "host" | "port" | "publicUrl">, boundPort: number): string {
  if (config.publicUrl !== `http://localhost:${config.port}`) return config.publicUrl;
  const wildcard = config.host === "0.0.0.0" || config.host === "::" || config.host === "[::]";
  const host = wildcard ? "127.0.0.1" : config.host;
  return `http://${host.includes(":") && !host.startsWith("[") ? `[${host}]` : host}:${boundPort}`;
}
