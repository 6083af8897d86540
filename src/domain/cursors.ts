/** Resource cursors are the item id in base64url without padding (SPEC §2). Pure. */
export function encodeCursor(id: string): string {
  return Buffer.from(id, "utf8").toString("base64url");
}

/** The id inside a cursor, or undefined when it is not a well-formed cursor. */
export function decodeCursor(cursor: string): string | undefined {
  if (!/^[A-Za-z0-9_-]{1,200}$/.test(cursor)) return undefined;
  const id = Buffer.from(cursor, "base64url").toString("utf8");
  // Round-trip check rejects strings that only look like base64url.
  return encodeCursor(id) === cursor && /^[A-Za-z0-9_]+$/.test(id) ? id : undefined;
}
