/**
 * The JSON text an object was parsed from, kept beside it so the object can
 * be sent on without serialising it again: a client's request body reaches
 * its engine as the bytes the client sent (plus the fields kvgate appends),
 * not as `JSON.stringify` of their parse, which costs time in proportion to
 * the prompt.
 *
 * Contract: `rememberJsonText(value, text)` only for a `value` that is
 * `JSON.parse(text)` of a JSON object text, and that nobody changes afterwards.
 * Request bodies are read-only past the frontend (a layer that needs another
 * body makes a new object, which has no text), so the text stays true. Kept
 * in a WeakMap: it lives exactly as long as its object.
 */
const texts = new WeakMap<object, string>();

/** Remembers that `value` is the parse of `text` (an object's JSON text; whitespace around it is dropped). */
export function rememberJsonText(value: object, text: string): void {
  texts.set(value, text.charCodeAt(text.length - 1) === 0x7d ? text : text.trimEnd());
}

/** The JSON text `value` was parsed from, if it was remembered; undefined otherwise. */
export function jsonTextOf(value: object): string | undefined {
  return texts.get(value);
}
