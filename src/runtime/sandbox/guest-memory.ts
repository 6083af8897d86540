/**
 * Guest code (part of the prelude, see guest-prelude.ts): removes the ways guest code could hold
 * memory that the isolate's limit (SANDBOX_MEMORY_MB) does not count.
 *
 * isolated-vm counts an ArrayBuffer against the limit when V8 allocates it through the isolate's
 * allocator; a fixed-size buffer larger than what is left is refused with a RangeError. A
 * *resizable* buffer (`new ArrayBuffer(0, {maxByteLength})`) reserves its address space up front
 * and `resize()` commits pages without asking that allocator: one run held 4 x 200 MB of a 64 MB
 * isolate, and the memory stayed with the daemon after the run. So:
 *
 * - `ArrayBuffer` is replaced by a constructor that refuses `maxByteLength`, and every way back to
 *   the original (`ArrayBuffer.prototype.constructor`, which `buffer.constructor`, subclasses and
 *   `slice()` go through) leads to the replacement. The original is kept only in this closure,
 *   which the prelude leaves before any component code runs.
 * - `resize`, `transfer` and `transferToFixedLength` are removed from `ArrayBuffer.prototype`.
 * - `WebAssembly` (memories grow outside the heap), `SharedArrayBuffer` (growable, and shared
 *   memory) and `Atomics` (`Atomics.wait` could park the isolate's thread) are removed.
 */
export const GUEST_MEMORY_SOURCE = `
(function () {
  const NativeArrayBuffer = ArrayBuffer;
  const proto = NativeArrayBuffer.prototype;
  const construct = Reflect.construct;
  const defineProperty = Object.defineProperty;
  const RESIZABLE = "resizable ArrayBuffers (maxByteLength) are not available in the sandbox";
  const Safe = function ArrayBuffer(length, options) {
    if (new.target === undefined) throw new TypeError("Constructor ArrayBuffer requires 'new'");
    if ((typeof options === "object" || typeof options === "function") && options !== null && options.maxByteLength !== undefined) {
      throw new TypeError(RESIZABLE);
    }
    // The options are never passed on, so a getter cannot answer differently the second time.
    return construct(NativeArrayBuffer, [length], new.target);
  };
  defineProperty(Safe, "length", { value: 1, writable: false, enumerable: false, configurable: true });
  defineProperty(Safe, "prototype", { value: proto, writable: false, enumerable: false, configurable: false });
  defineProperty(Safe, "isView", { value: NativeArrayBuffer.isView, writable: true, enumerable: false, configurable: true });
  defineProperty(Safe, Symbol.species, { get: function () { return this; }, enumerable: false, configurable: true });
  defineProperty(proto, "constructor", { value: Safe, writable: true, enumerable: false, configurable: true });
  for (const name of ["resize", "transfer", "transferToFixedLength"]) delete proto[name];
  defineProperty(globalThis, "ArrayBuffer", { value: Safe, writable: true, enumerable: false, configurable: true });
  if (typeof SharedArrayBuffer === "function") delete SharedArrayBuffer.prototype.grow;
})();
delete globalThis.WebAssembly;
delete globalThis.SharedArrayBuffer;
delete globalThis.Atomics;
`;
