/**
 * How deeply component code nests brackets, measured before the code reaches esbuild.
 *
 * esbuild's parser recurses once per nesting level; half a megabyte of `[[[…]]]` overflows its
 * stack and ends its service process (the compiler backstop in compiler.ts recovers from that,
 * but at the cost of a crashed process and a gigabyte of stack). Real components nest a few dozen
 * levels, so anything past MAX_NESTING is refused with a clear message instead.
 *
 * The scan is lexical: it skips strings, comments, template text and regular expression literals
 * (telling a regex from a division by the token before it, as JavaScript tokenizers do), and
 * counts `(`, `[`, `{` and template `${`. A mistaken guess can only shift the count by the
 * brackets inside one literal, far from the limit; it never makes the compiler unsafe, because the
 * backstop does not depend on it.
 */

/** Deepest bracket nesting accepted in component code. */
export const MAX_NESTING = 1000;

/** Keywords after which a `/` starts a regular expression rather than a division. */
const REGEX_AFTER = new Set([
  "return",
  "typeof",
  "instanceof",
  "in",
  "of",
  "new",
  "delete",
  "void",
  "throw",
  "case",
  "do",
  "else",
  "yield",
  "await",
]);

const isIdentChar = (c: number): boolean =>
  (c >= 48 && c <= 57) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 36 || c === 95 || c === 92 || c > 127;

/**
 * The deepest bracket nesting in `code`, or the first depth past `limit` (the scan stops there).
 * Unbalanced closers are ignored rather than counted negative.
 */
export function bracketDepth(code: string, limit = MAX_NESTING): number {
  // One entry per open bracket: true for a template's `${`, whose `}` resumes template text.
  const open: boolean[] = [];
  let deepest = 0;
  // Whether the last token was a value (identifier, number, literal, closing bracket): then `/` divides.
  let afterValue = false;
  let i = 0;
  const n = code.length;

  /** Skips template text from i (just after a backtick or a closing `}`); true if a `${` opened. */
  const templateText = (): boolean => {
    while (i < n) {
      const c = code.charCodeAt(i);
      if (c === 92)
        i += 2; // backslash escape
      else if (c === 96) {
        i++;
        return false;
      } else if (c === 36 && code.charCodeAt(i + 1) === 123) {
        i += 2;
        return true;
      } else i++;
    }
    return false;
  };
  const push = (template: boolean): boolean => {
    open.push(template);
    if (open.length > deepest) deepest = open.length;
    return deepest > limit;
  };

  while (i < n) {
    const c = code.charCodeAt(i);
    const next = code.charCodeAt(i + 1);
    if (c === 32 || c === 9 || c === 10 || c === 13) {
      i++;
    } else if (c === 47 && next === 47) {
      // line comment
      const end = code.indexOf("\n", i);
      i = end < 0 ? n : end;
    } else if (c === 47 && next === 42) {
      // block comment
      const end = code.indexOf("*/", i + 2);
      i = end < 0 ? n : end + 2;
    } else if (c === 34 || c === 39) {
      // string: ends at the same quote or, unterminated, at the line's end
      i++;
      while (i < n) {
        const d = code.charCodeAt(i);
        if (d === 92) i += 2;
        else if (d === c || d === 10) {
          i++;
          break;
        } else i++;
      }
      afterValue = true;
    } else if (c === 96) {
      i++;
      const opened = templateText();
      if (opened && push(true)) return deepest;
      afterValue = !opened;
    } else if (c === 47 && !afterValue) {
      // regular expression literal; `/` inside a class `[...]` does not end it
      i++;
      let inClass = false;
      while (i < n) {
        const d = code.charCodeAt(i);
        if (d === 92) i += 2;
        else if (d === 10) break;
        else {
          i++;
          if (d === 91) inClass = true;
          else if (d === 93) inClass = false;
          else if (d === 47 && !inClass) break;
        }
      }
      afterValue = true;
    } else if (isIdentChar(c)) {
      const start = i;
      while (i < n && isIdentChar(code.charCodeAt(i))) i++;
      afterValue = !REGEX_AFTER.has(code.slice(start, i));
    } else if (c === 40 || c === 91 || c === 123) {
      i++;
      if (push(false)) return deepest;
      afterValue = false;
    } else if (c === 41 || c === 93 || c === 125) {
      i++;
      const template = open.pop();
      if (template && c === 125) {
        // The `}` of a `${`: template text resumes; the template is a value once it ends.
        const opened = templateText();
        if (opened && push(true)) return deepest;
        afterValue = !opened;
      } else {
        // After `}` a regex is likelier (a block ended) than a division of an object literal.
        afterValue = c !== 125;
      }
    } else {
      i++;
      afterValue = false;
    }
  }
  return deepest;
}
