/**
 * Text every store holds as it was sent (docs/DESIGN.md rule 14), the one rule both halves apply to the strings they
 * keep: well-formed Unicode without NUL. PostgreSQL's text refuses NUL (SQLite keeps it), and a lone surrogate has
 * no UTF-8 form: the drivers write U+FFFD for it, so `x\ud800` and `x\udc00` would become one key on PostgreSQL and
 * in both ledgers' hashes. A key or an id outside the rule is refused (-32602 naming the field on the wire); free
 * text (a status message) is made storable with `storableText`, the same on every store.
 */
import type * as z from 'zod/v4';

/** A NUL, a high surrogate not followed by a low one, or a low surrogate not preceded by a high one. */
const UNSTORABLE = /\0|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;
const UNSTORABLE_ALL = new RegExp(UNSTORABLE.source, 'g');

/** What keeps `value` from being stored as it is (`contains a NUL character at index 3`), or undefined. */
export function unstorableText(value: string): string | undefined {
  const found = UNSTORABLE.exec(value);
  if (!found) return undefined;
  if (found[0] === '\0') return `contains a NUL character at index ${found.index}`;
  const unit = found[0].charCodeAt(0).toString(16).toUpperCase();
  return `contains a lone surrogate (\\u${unit}) at index ${found.index}`;
}

/** `<field> must be well-formed Unicode text without NUL characters: it contains ...`, or undefined when it is. */
export function unstorableField(field: string, value: string): string | undefined {
  const why = unstorableText(value);
  return why && `${field} must be well-formed Unicode text without NUL characters: it ${why}`;
}

/** `value` with each NUL and lone surrogate replaced by U+FFFD, for free text that must be kept whatever it holds. */
export function storableText(value: string): string {
  return UNSTORABLE.test(value) ? value.replace(UNSTORABLE_ALL, '\uFFFD') : value;
}

/** `schema`, refusing (naming `field`) a string that holds NUL or a lone surrogate: for keys and ids on the wire. */
export function storable<T extends z.ZodString>(schema: T, field: string): T {
  return schema.superRefine((value, ctx) => {
    const refused = unstorableField(field, value);
    if (refused !== undefined) ctx.addIssue({ code: 'custom', message: refused, input: value });
  });
}
