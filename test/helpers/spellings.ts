/**
 * Other spellings of a route path, for tests that prove a guard cannot be bypassed by how a path
 * is written: letter case, percent-encoded letters.
 */

/** Every upper/lower-case mix of `word`'s letters (2^letters spellings, the word itself first). */
export function caseMixes(word: string): string[] {
  let out = [""];
  for (const ch of word) {
    const forms = ch.toLowerCase() === ch.toUpperCase() ? [ch] : [ch.toLowerCase(), ch.toUpperCase()];
    out = out.flatMap((prefix) => forms.map((f) => prefix + f));
  }
  return out;
}

const capitalised = (s: string) => s.charAt(0).toUpperCase() + s.slice(1);
/** `admin` -> `%61dmin`: a percent-encoded first letter, which decodes to the same name. */
export const percentFirst = (s: string): string => `%${s.charCodeAt(0).toString(16)}${s.slice(1)}`;

/**
 * Spellings of `/<prefix>/<rest...>` other than the exact one: every case mix of the prefix with
 * the rest as is, the exact prefix with the static segments of the rest upper-cased or
 * capitalised, everything upper-cased, and a percent-encoded first letter of the prefix.
 * `dynamic` holds the indexes in `rest` of ids, which keep their spelling.
 */
export function otherSpellings(prefix: string, rest: readonly string[], dynamic: ReadonlySet<number> = new Set()): string[] {
  const join = (p: string, segs: readonly string[]) => `/${[p, ...segs].join("/")}`;
  const exact = join(prefix, rest);
  const mapStatic = (f: (s: string) => string) => rest.map((s, i) => (dynamic.has(i) ? s : f(s)));
  const all = new Set<string>([
    ...caseMixes(prefix).map((p) => join(p, rest)),
    join(
      prefix,
      mapStatic((s) => s.toUpperCase()),
    ),
    join(prefix, mapStatic(capitalised)),
    join(
      prefix.toUpperCase(),
      mapStatic((s) => s.toUpperCase()),
    ),
    join(percentFirst(prefix), rest),
  ]);
  all.delete(exact);
  return [...all];
}
