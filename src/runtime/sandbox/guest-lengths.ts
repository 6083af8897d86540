/**
 * Guest code (part of the prelude, see guest-prelude.ts): keeps component code away from V8's
 * fatal paths for huge arrays.
 *
 * V8 does not fail a few built-ins gracefully when they are asked for an array far past the
 * isolate's memory: `new Array(2e8).fill(1)` (a backing store past V8's maximum length, or a
 * dictionary that grows past the heap in one step), `JSON.parse` of a 150-million-element array
 * and `"…".split("")` of a 268-million-character string are a V8 fatal error or an out-of-memory
 * V8 cannot contain, and isolated-vm can only report it as a catastrophic error (the process must
 * end). Others (`splice`, `sort`, `indexOf` on an array of length 2^32-1) are a loop in C++ that a
 * time-out cannot interrupt: the run ends, its thread keeps a core busy for minutes.
 *
 * So, before any component code runs, the built-ins that work through an array's whole length (or
 * build an array from a length) refuse one longer than `maxElements` with a RangeError. An array of
 * that many elements could not fit in the isolate's memory anyway (8 bytes an element: see
 * maxArrayElements). The replacements live only in this closure's reach, and:
 *
 * - the length they check is the one the original built-in then uses. A plain array's `length` is
 *   an own data property (no component code runs between the check and the built-in's own read);
 *   any other receiver (a proxy, an array-like with a length getter, a length object whose
 *   `valueOf` answers differently twice) reaches the built-in through a view whose `length` is the
 *   value checked. Every proxy is noted when it is made (the global `Proxy` is replaced), so a
 *   proxy cannot pass for a plain array;
 * - `concat` and `flat`/`flatMap`, which read the lengths of other arrays as they go, are done here
 *   when they are not the plain case, counting every element against the limit;
 * - `JSON.parse` refuses a text longer than 2 × maxElements characters (no more elements than that
 *   limit can come out of it); `split` stops one element past the limit, and a global `match` on a
 *   string longer than the limit collects its matches here.
 *
 * What stays out of reach of any prelude (V8 grows hash tables of objects, Maps and Sets by
 * doubling, and the doubling can fail the same way) is contained by the sandbox process: see
 * docs/guide/writing-sources.md and sandbox-process.ts.
 */

/** V8 keeps an array of up to 32 Mi elements in one block; the bound stays well below. */
const MAX_ARRAY_ELEMENTS = 2 ** 24;

/** The longest array the sandbox's built-ins accept for an isolate of `memoryMb` MB. */
export function maxArrayElements(memoryMb: number): number {
  return Math.max(1024, Math.min(Math.floor((memoryMb * 1024 * 1024) / 8), MAX_ARRAY_ELEMENTS));
}

/** Runs in the prelude's scope (`uncurry` is defined there); `maxElements` comes from the host. */
export const GUEST_LENGTHS_SOURCE = `
(function (maxElements) {
  const NativeProxy = Proxy;
  const apply = Reflect.apply;
  const construct = Reflect.construct;
  const reflectGet = Reflect.get;
  const reflectSet = Reflect.set;
  const defineProperty = Object.defineProperty;
  const getOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
  const getPrototypeOf = Object.getPrototypeOf;
  const hasOwn = Object.hasOwn;
  const isArray = Array.isArray;
  const mathTrunc = Math.trunc;
  const weakSetHas = uncurry(WeakSet.prototype.has);
  const weakSetAdd = uncurry(WeakSet.prototype.add);
  const stringIncludes = uncurry(String.prototype.includes);
  const stringCodePointAt = uncurry(String.prototype.codePointAt);
  const ArrayProto = Array.prototype;
  const ObjectProto = Object.prototype;
  const SPREADABLE = Symbol.isConcatSpreadable;
  const ITERATOR = Symbol.iterator;
  const MAX_SAFE = 9007199254740991;
  const nativeSlice = ArrayProto.slice;
  const nativeConcat = ArrayProto.concat;

  function tooLong(what, length) {
    return new RangeError("Invalid array length: arrays are limited to " + maxElements +
      " elements in the sandbox (" + what + " on a length of " + length + ")");
  }
  // ToString, as the built-ins do it (a Symbol throws).
  const toStringValue = (v) => \`\${v}\`;
  // ToLength, the value converted once (an object's valueOf runs once, as in the built-in).
  function toLength(v) {
    let n = +v;
    if (!(n > 0)) return 0;
    n = mathTrunc(n);
    return n > MAX_SAFE ? MAX_SAFE : n;
  }
  // Descriptors without a prototype: a component's Object.prototype.get cannot change their meaning.
  function createDataProperty(o, key, value) {
    defineProperty(o, key, { __proto__: null, value, writable: true, enumerable: true, configurable: true });
  }

  // Every proxy made from here on is noted: only a plain array is trusted to keep its length.
  const proxies = new WeakSet();
  const nativeRevocable = NativeProxy.revocable;
  defineProperty(NativeProxy, "revocable", {
    value: function revocable(target, handler) {
      const r = nativeRevocable(target, handler);
      weakSetAdd(proxies, r.proxy);
      return r;
    },
    writable: true, enumerable: false, configurable: true,
  });
  const SafeProxy = new NativeProxy(NativeProxy, {
    __proto__: null,
    construct(target, args, newTarget) {
      const p = construct(target, args, newTarget);
      weakSetAdd(proxies, p);
      return p;
    },
  });
  defineProperty(globalThis, "Proxy", { value: SafeProxy, writable: true, enumerable: false, configurable: true });

  // A view of o whose length is len, whatever o's own length does; everything else is o's.
  function lengthView(o, len, hideIterator) {
    return new NativeProxy(o, {
      __proto__: null,
      get(target, key) {
        if (key === "length") return len;
        if (hideIterator && key === ITERATOR) return undefined;
        return reflectGet(target, key, target);
      },
      set(target, key, value) { return reflectSet(target, key, value, target); },
    });
  }

  // The receiver to call the built-in on, its length checked (see the header).
  function checked(o, what) {
    if (o === null || o === undefined) return o; // the built-in throws its own TypeError
    if (typeof o !== "object" && typeof o !== "function") {
      if (typeof o === "string" && o.length > maxElements) throw tooLong(what, o.length);
      return o;
    }
    if (!weakSetHas(proxies, o)) {
      if (isArray(o)) {
        if (o.length > maxElements) throw tooLong(what, o.length);
        return o;
      }
      const d = getOwnPropertyDescriptor(o, "length");
      if (d !== undefined && hasOwn(d, "value") && typeof d.value === "number") {
        const n = toLength(d.value);
        if (n > maxElements) throw tooLong(what, n);
        return o;
      }
    }
    const len = toLength(reflectGet(o, "length", o));
    if (len > maxElements) throw tooLong(what, len);
    return lengthView(o, len, false);
  }

  function install(owner, name, fn, length) {
    defineProperty(fn, "length", { value: length, writable: false, enumerable: false, configurable: true });
    defineProperty(owner, name, { value: fn, writable: true, enumerable: false, configurable: true });
  }

  const GUARDED = ["copyWithin", "fill", "join", "toLocaleString", "indexOf", "lastIndexOf", "includes",
    "reverse", "sort", "splice", "slice", "shift", "unshift", "map", "filter", "forEach", "some", "every",
    "reduce", "reduceRight", "find", "findIndex", "findLast", "findLastIndex", "toReversed", "toSorted",
    "toSpliced", "with"];
  for (const name of GUARDED) {
    const native = ArrayProto[name];
    if (typeof native !== "function") continue;
    const what = "Array.prototype." + name;
    // A method (not a constructor, no prototype), named like the built-in.
    const fn = { [name](...args) {
      const target = checked(this, what);
      const result = apply(native, target, args);
      return result === target && target !== this ? this : result;
    } }[name];
    install(ArrayProto, name, fn, native.length);
  }

  // concat: the plain case (plain arrays and primitives, nothing defines Symbol.isConcatSpreadable)
  // is the built-in, the total length checked first; anything else is done here.
  function plainArray(E) {
    return isArray(E) && !weakSetHas(proxies, E) && getPrototypeOf(E) === ArrayProto && !hasOwn(E, SPREADABLE);
  }
  function spreadDefaults() {
    return !hasOwn(ArrayProto, SPREADABLE) && !hasOwn(ObjectProto, SPREADABLE) && getPrototypeOf(ArrayProto) === ObjectProto;
  }
  function isConcatSpreadable(E) {
    if (E === null || (typeof E !== "object" && typeof E !== "function")) return false;
    const s = E[SPREADABLE];
    if (s !== undefined) return !!s;
    return isArray(E);
  }
  const concat = { concat(...items) {
    const O = this;
    if (plainArray(O) && spreadDefaults()) {
      let total = O.length;
      let plain = true;
      for (let i = 0; i < items.length; i++) {
        const E = items[i];
        if (E === null || (typeof E !== "object" && typeof E !== "function")) total += 1;
        else if (plainArray(E)) total += E.length;
        else { plain = false; break; }
      }
      if (plain) {
        if (total > maxElements) throw tooLong("Array.prototype.concat", total);
        return apply(nativeConcat, O, items);
      }
    }
    if (O === null || O === undefined) throw new TypeError("Array.prototype.concat called on null or undefined");
    const target = Object(O);
    const A = apply(nativeSlice, target, [0, 0]); // ArraySpeciesCreate(O, 0)
    let n = 0;
    for (let i = -1; i < items.length; i++) {
      const E = i < 0 ? target : items[i];
      if (isConcatSpreadable(E)) {
        const len = toLength(reflectGet(E, "length", E));
        if (n + len > maxElements) throw tooLong("Array.prototype.concat", n + len);
        for (let k = 0; k < len; k++, n++) if (k in E) createDataProperty(A, n, reflectGet(E, k, E));
      } else {
        if (n + 1 > maxElements) throw tooLong("Array.prototype.concat", n + 1);
        createDataProperty(A, n++, E);
      }
    }
    if (!reflectSet(A, "length", n, A)) throw new TypeError("Cannot set the length of the array concat made");
    return A;
  } }.concat;
  install(ArrayProto, "concat", concat, 1);

  // flat and flatMap (FlattenIntoArray), every nested length read once and checked.
  function flattenInto(A, source, sourceLen, start, depth, mapper, thisArg, what) {
    let t = start;
    for (let k = 0; k < sourceLen; k++) {
      if (!(k in source)) continue;
      let element = reflectGet(source, k, source);
      if (mapper !== undefined) element = apply(mapper, thisArg, [element, k, source]);
      if (depth > 0 && isArray(element)) {
        const len = toLength(reflectGet(element, "length", element));
        if (len > maxElements) throw tooLong(what, len);
        t = flattenInto(A, element, len, t, depth - 1, undefined, undefined, what);
      } else {
        if (t >= maxElements) throw tooLong(what, t + 1);
        createDataProperty(A, t++, element);
      }
    }
    return t;
  }
  function flatSource(self, what) {
    if (self === null || self === undefined) throw new TypeError(what + " called on null or undefined");
    const O = Object(self);
    const len = toLength(reflectGet(O, "length", O));
    if (len > maxElements) throw tooLong(what, len);
    return { O, len };
  }
  const flat = { flat(depth) {
    const { O, len } = flatSource(this, "Array.prototype.flat");
    let d = 1;
    if (depth !== undefined) { d = +depth; d = d !== d ? 0 : d === Infinity ? Infinity : mathTrunc(d); if (d < 0) d = 0; }
    const A = apply(nativeSlice, O, [0, 0]);
    flattenInto(A, O, len, 0, d, undefined, undefined, "Array.prototype.flat");
    return A;
  } }.flat;
  install(ArrayProto, "flat", flat, 0);
  const flatMap = { flatMap(mapper, thisArg) {
    const { O, len } = flatSource(this, "Array.prototype.flatMap");
    if (typeof mapper !== "function") throw new TypeError("flatMap mapper function is not callable");
    const A = apply(nativeSlice, O, [0, 0]);
    flattenInto(A, O, len, 0, 1, mapper, thisArg, "Array.prototype.flatMap");
    return A;
  } }.flatMap;
  install(ArrayProto, "flatMap", flatMap, 1);

  // Array.from: an iterable is the built-in's (it grows the array as it goes, which the memory
  // limit stops); an array-like's length is checked, and the built-in sees that length only.
  const nativeFrom = Array.from;
  const from = { from(items, mapFn, thisArg) {
    if (mapFn !== undefined && typeof mapFn !== "function") throw new TypeError(mapFn + " is not a function");
    if (items !== null && items !== undefined) {
      const usingIterator = items[ITERATOR];
      if (usingIterator !== undefined && usingIterator !== null) {
        const iterable = { [ITERATOR]() { return apply(usingIterator, items, []); } };
        return apply(nativeFrom, this, [iterable, mapFn, thisArg]);
      }
      const O = Object(items);
      const len = toLength(reflectGet(O, "length", O));
      if (len > maxElements) throw tooLong("Array.from", len);
      return apply(nativeFrom, this, [lengthView(O, len, true), mapFn, thisArg]);
    }
    return apply(nativeFrom, this, [items, mapFn, thisArg]);
  } }.from;
  install(Array, "from", from, 1);

  // JSON.parse: no more elements than maxElements can come out of 2 × maxElements characters.
  const nativeParse = JSON.parse;
  const maxJson = maxElements * 2;
  const jsonParse = { parse(text, reviver) {
    const s = typeof text === "string" ? text : toStringValue(text);
    if (s.length > maxJson) {
      throw new RangeError("JSON.parse: the text is " + s.length + " characters; the sandbox parses at most " + maxJson);
    }
    return apply(nativeParse, JSON, [s, reviver]);
  } }.parse;
  install(JSON, "parse", jsonParse, 2);

  // split: the result is cut one element past the limit, and such a result is refused.
  function splitLimit(limit) {
    return limit === undefined ? 4294967295 : limit >>> 0;
  }
  function guardSplit(owner, key, name, what) {
    const native = owner[key];
    const fn = { [name](separatorOrString, limit) {
      const lim = splitLimit(limit);
      if (lim <= maxElements) return apply(native, this, [separatorOrString, lim]);
      const r = apply(native, this, [separatorOrString, maxElements + 1]);
      if (r !== null && typeof r === "object" && r.length > maxElements) {
        throw new RangeError(what + ": the result would have more than " + maxElements + " elements, the sandbox's limit for an array");
      }
      return r;
    } }[name];
    install(owner, key, fn, 2);
  }
  guardSplit(String.prototype, "split", "split", "String.prototype.split");
  guardSplit(RegExp.prototype, Symbol.split, "[Symbol.split]", "RegExp.prototype[Symbol.split]");

  // A global match on a string longer than the limit: the matches are collected here, counted.
  const RegExpProto = RegExp.prototype;
  const nativeMatch = RegExpProto[Symbol.match];
  const nativeExec = RegExpProto.exec;
  function regExpExec(R, S) {
    const exec = R.exec;
    if (typeof exec === "function") {
      const result = apply(exec, R, [S]);
      if (result !== null && typeof result !== "object" && typeof result !== "function") {
        throw new TypeError("exec must return an object or null");
      }
      return result;
    }
    return apply(nativeExec, R, [S]);
  }
  const match = { [Symbol.match](string) {
    const rx = this;
    if (rx === null || (typeof rx !== "object" && typeof rx !== "function")) {
      throw new TypeError("RegExp.prototype[Symbol.match] called on a non-object");
    }
    const S = toStringValue(string);
    if (S.length <= maxElements) return apply(nativeMatch, rx, [S]);
    const flags = toStringValue(rx.flags);
    if (!stringIncludes(flags, "g")) return regExpExec(rx, S);
    const fullUnicode = stringIncludes(flags, "u") || stringIncludes(flags, "v");
    if (!reflectSet(rx, "lastIndex", 0)) throw new TypeError("Cannot assign to lastIndex");
    const A = [];
    for (let n = 0; ; n++) {
      const result = regExpExec(rx, S);
      if (result === null) return n === 0 ? null : A;
      if (n >= maxElements) {
        throw new RangeError("RegExp.prototype[Symbol.match]: more than " + maxElements + " matches, the sandbox's limit for an array");
      }
      const matched = toStringValue(result[0]);
      createDataProperty(A, n, matched);
      if (matched === "") {
        const i = toLength(rx.lastIndex);
        const cp = fullUnicode && i + 1 < S.length ? stringCodePointAt(S, i) : 0;
        if (!reflectSet(rx, "lastIndex", i + (cp > 0xffff ? 2 : 1))) throw new TypeError("Cannot assign to lastIndex");
      }
    }
  } }[Symbol.match];
  install(RegExpProto, Symbol.match, match, 1);
})($1);
`;
