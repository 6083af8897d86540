/**
 * name_slug: lowercase; runs of characters outside [a-z0-9] become "-"; trimmed of "-" (SPEC §2).
 * A name with nothing sluggable falls back to "source".
 */
export function slugify(name: string): string {
  const slug = name
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, "-")
    .replace(/^-+|-+$/g, "")
    .slice(0, 100)
    .replace(/-+$/g, "");
  return slug || "source";
}

/** The first of `base`, `base-2`, `base-3`… that is not taken. */
export function uniqueSlug(base: string, isTaken: (slug: string) => boolean): string {
  if (!isTaken(base)) return base;
  for (let n = 2; ; n++) {
    const candidate = `${base}-${n}`;
    if (!isTaken(candidate)) return candidate;
  }
}
