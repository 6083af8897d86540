/** One Redis or Sentinel node address. */
export interface HostPort {
  readonly host: string;
  readonly port: number;
}

/**
 * Parses `host:port,host:port,...` (REDIS_SENTINELS, REDIS_CLUSTER_NODES). Spaces around entries
 * are ignored; an IPv6 address is written in brackets (`[::1]:26379`). Returns a message instead of
 * throwing, for the config schema to report; duplicates are an error (one node named twice is a
 * typo, and a sentinel counted twice would not add a vote).
 */
export function parseHostList(text: string): { ok: true; nodes: HostPort[] } | { ok: false; message: string } {
  const entries = text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  if (entries.length === 0) return { ok: false, message: "accepts a comma list of host:port" };
  const nodes: HostPort[] = [];
  const seen = new Set<string>();
  for (const entry of entries) {
    const m = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9._-]+)):(\d{1,5})$/.exec(entry);
    const host = m?.[1] ?? m?.[2];
    const port = Number(m?.[3]);
    if (!m || !host || !Number.isInteger(port) || port < 1 || port > 65535) {
      return { ok: false, message: `accepts a comma list of host:port (not "${entry}")` };
    }
    const key = `${host.toLowerCase()}:${port}`;
    if (seen.has(key)) return { ok: false, message: `names ${entry} twice` };
    seen.add(key);
    nodes.push({ host, port });
  }
  return { ok: true, nodes };
}
