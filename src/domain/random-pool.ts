/**
 * Serves random bytes from a pooled buffer refilled in large blocks: ids are made on every request,
 * and one `randomBytes(4096)` costs far less than hundreds of small calls. `fill` is injected
 * (crypto.randomFillSync in production), so this module stays free of I/O.
 *
 * What it returns is a view of the block, whose other bytes make other ids, API keys and secrets:
 * read it at once (every caller turns it into a string, or copies it with `Buffer.from`) and never
 * hand the view itself on (its `.buffer` is the whole block).
 */
export function pooledRandomBytes(fill: (buf: Uint8Array) => void, blockSize = 4096): (n: number) => Uint8Array {
  let pool = new Uint8Array(0);
  let offset = 0;
  return (n: number) => {
    if (n > blockSize) {
      const out = new Uint8Array(n);
      fill(out);
      return out;
    }
    if (offset + n > pool.length) {
      pool = new Uint8Array(blockSize);
      fill(pool);
      offset = 0;
    }
    // A view, not a copy (a copy is a new ArrayBuffer, with its own malloc and sweep, on every id):
    // the bytes are never handed out again, and a refill takes a new block instead of rewriting this one.
    const out = pool.subarray(offset, offset + n);
    offset += n;
    return out;
  };
}
