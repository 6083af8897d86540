import { lookup as dnsLookup, type LookupAddress } from "node:dns";
import { isIP, type LookupFunction } from "node:net";
import { Agent, buildConnector } from "undici";
import { DestinationRefusedError } from "./errors.js";
import { isPrivateAddress } from "./private-address.js";

/**
 * The one outbound HTTP agent, shared by webhook deliveries, component_url fetches and the
 * sandbox's `fetch`. Unless private destinations are allowed, it checks the address it is about to
 * connect to — after DNS resolution, at connect time — so a hostname that passed validation and
 * later re-points to 127.0.0.1 or 169.254.169.254 (DNS rebinding) is still refused. Validating
 * the URL text alone could not give that guarantee.
 *
 * undici's Agent keeps a keep-alive pool per origin; each new socket goes through the check.
 */

/** Resolves a hostname to every address, like `dns.lookup(host, {all: true})`. Injectable for tests. */
export type ResolveAll = (
  hostname: string,
  options: { family?: number; hints?: number },
  callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
) => void;

export interface GuardedAgentOptions {
  /** ALLOW_PRIVATE_DESTINATIONS: skip the guard entirely. */
  readonly allowPrivate: boolean;
  /** Time allowed for DNS + TCP (+ TLS) of a new connection. Default 10 s. */
  readonly connectTimeoutMs?: number;
  /** Idle time after which a pooled connection is closed. Default 4 s (undici's default). */
  readonly keepAliveTimeoutMs?: number;
  /** Upper bound for a server-suggested keep-alive timeout. Default 10 min. */
  readonly keepAliveMaxTimeoutMs?: number;
  /** Concurrent connections per origin; default unlimited (bounded by worker concurrency). */
  readonly connectionsPerOrigin?: number;
  /** DNS resolution; default `dns.lookup`, which honours /etc/hosts like every other client. */
  readonly resolve?: ResolveAll;
  /** Which addresses to refuse when `allowPrivate` is false; default `isPrivateAddress`. */
  readonly refuseAddress?: (ip: string) => boolean;
}

const systemResolve: ResolveAll = (hostname, options, callback) => {
  dnsLookup(hostname, { family: options.family ?? 0, hints: options.hints ?? 0, all: true }, callback);
};

export function createGuardedAgent(options: GuardedAgentOptions): Agent {
  const resolve = options.resolve ?? systemResolve;
  const refuse = options.refuseAddress ?? isPrivateAddress;
  const base = buildConnector({
    timeout: options.connectTimeoutMs ?? 10_000,
    keepAlive: true,
    lookup: options.allowPrivate ? toLookup(resolve, () => true) : toLookup(resolve, (a) => !refuse(a.address)),
  });
  const connect: buildConnector.connector = (opts, callback) => {
    // node:net does not call `lookup` for IP literals, so those are checked here. undici has
    // already stripped the brackets from IPv6 hosts.
    if (!options.allowPrivate && isIP(opts.hostname) !== 0 && refuse(opts.hostname)) {
      callback(new DestinationRefusedError(opts.hostname, opts.hostname), null);
      return;
    }
    base(opts, callback);
  };
  return new Agent({
    connect,
    keepAliveTimeout: options.keepAliveTimeoutMs ?? 4_000,
    keepAliveMaxTimeout: options.keepAliveMaxTimeoutMs ?? 600_000,
    ...(options.connectionsPerOrigin === undefined ? {} : { connections: options.connectionsPerOrigin }),
  });
}

/**
 * A `net.connect` lookup that resolves every address and keeps those `allowed` accepts.
 * Disallowed addresses are dropped rather than failing the whole name, so a host with both a
 * public and a private record is reached on the public one only; a name with no allowed address
 * fails with DestinationRefusedError, which node:net hands to undici as the connect error.
 */
function toLookup(resolve: ResolveAll, allowed: (a: LookupAddress) => boolean): LookupFunction {
  return (hostname, lookupOptions, callback) => {
    const family = typeof lookupOptions.family === "number" ? lookupOptions.family : familyNumber(lookupOptions.family);
    resolve(hostname, { family, hints: lookupOptions.hints ?? 0 }, (err, addresses) => {
      if (err) {
        callback(err, "");
        return;
      }
      const usable = addresses.filter(allowed);
      const first = usable[0];
      if (first === undefined) {
        callback(new DestinationRefusedError(hostname, addresses[0]?.address ?? "no address"), "");
        return;
      }
      // With Happy Eyeballs (autoSelectFamily, on by default in Node 20) node:net asks for all
      // addresses; otherwise it wants one.
      if (lookupOptions.all) callback(null, usable);
      else callback(null, first.address, first.family);
    });
  };
}

function familyNumber(family: string | undefined): number {
  if (family === "IPv4") return 4;
  if (family === "IPv6") return 6;
  return 0;
}
