/**
 * Whether a request path lies under a route prefix in any spelling a router might be lenient
 * about: letter case, percent-encoded letters (`/%61dmin`) and repeated leading slashes. Guards
 * that must never be bypassed (the admin token) are applied by this test before any router
 * matches, so a router's own matching rules cannot open a way around them.
 *
 * `prefix` is lower-case and starts with `/`, e.g. `/admin`.
 */
export function isUnderPrefix(path: string, prefix: string): boolean {
  // Only ASCII letters matter for the comparison, so each %XX is decoded as one byte; malformed
  // escapes stay as they are (a router would not match them either).
  const decoded = path.includes("%")
    ? path.replace(/%([0-9a-fA-F]{2})/g, (_, hex: string) => String.fromCharCode(Number.parseInt(hex, 16)))
    : path;
  const p = decoded.replace(/^\/+/, "/").toLowerCase();
  return p === prefix || p.startsWith(`${prefix}/`);
}
