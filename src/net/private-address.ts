import ipaddr from "ipaddr.js";

/**
 * Which IP addresses the SSRF guard refuses. The rule is an allow-list: only addresses that
 * ipaddr.js classifies as ordinary `unicast` pass; loopback, RFC 1918, link-local (which holds the
 * 169.254.169.254 cloud metadata service), unique-local (fd00:ec2::254), carrier-grade NAT,
 * multicast, broadcast, unspecified, documentation and reserved ranges are refused. IPv6 forms
 * that embed an IPv4 address (mapped, translated, NAT64, 6to4) are judged by that address, so
 * `::ffff:127.0.0.1` cannot sneak past.
 */
export function isPrivateAddress(ip: string): boolean {
  // Fail closed: something that is not an address cannot be shown to be safe.
  if (!ipaddr.isValid(ip)) return true;
  return isPrivateParsed(ipaddr.parse(ip));
}

function isPrivateParsed(addr: ipaddr.IPv4 | ipaddr.IPv6): boolean {
  if (addr instanceof ipaddr.IPv4) return addr.range() !== "unicast";
  const v6 = addr;
  const embedded = embeddedIPv4(v6);
  if (embedded !== undefined) return isPrivateParsed(embedded);
  const range = v6.range();
  if (range !== "unicast") return true;
  // ::/8 beyond the named ranges holds the deprecated IPv4-compatible form (::127.0.0.1), which
  // some stacks still route to IPv4; nothing legitimate lives there.
  return v6.parts[0] === 0;
}

/** The IPv4 address an IPv6 address stands for, when it is one of the embedding forms. */
function embeddedIPv4(v6: ipaddr.IPv6): ipaddr.IPv4 | undefined {
  const p = v6.parts;
  const fromParts = (hi: number, lo: number) => new ipaddr.IPv4([hi >> 8, hi & 0xff, lo >> 8, lo & 0xff]);
  switch (v6.range()) {
    case "ipv4Mapped": // ::ffff:a.b.c.d
      return v6.toIPv4Address();
    case "rfc6145": // ::ffff:0:a.b.c.d
      return fromParts(p[6]!, p[7]!);
    case "rfc6052":
      // 64:ff9b::/96 (well-known NAT64) embeds a.b.c.d in the last 32 bits. The local-use prefix
      // 64:ff9b:1::/48 is site-specific and stays refused: fall through to the range check.
      return p[1] === 0xff9b && p[2] === 0 && p[3] === 0 && p[4] === 0 && p[5] === 0 ? fromParts(p[6]!, p[7]!) : undefined;
    case "6to4": // 2002:aabb:ccdd::/48
      return fromParts(p[1]!, p[2]!);
    default:
      return undefined;
  }
}
