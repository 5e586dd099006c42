/**
 * Serialises a client's parsed JSON body once, with routing fields laid over it.
 *
 * `extraFields` replace top-level keys of the body; a field set to `undefined`
 * removes the key (JSON drops undefined members), which is how dialects strip
 * `stream_options` from a prefill leg without copying the body twice.
 * A top-level `bigint` field is written as an exact JSON integer: SGLang's
 * `bootstrap_room` is a 63-bit number that a JS number cannot hold.
 * A body remembered with its members (common's json-text.ts) is never
 * serialised: its members' slices are joined with the fields, replaced ones
 * where they stood; a large body's slices are the client's own bytes, so
 * what is sent is bytes (`requestPayload`), not a string undici encodes again.
 */
import { jsonTextOf, writeJsonWith } from '../common/index.js';
import { KvgateError } from '../errors/index.js';

export type JsonObject = Readonly<Record<string, unknown>>;

/**
 * What an engine is sent for `body` plus `extraFields`: JSON text, or UTF-8 bytes when the body is remembered as the
 * client's bytes (json-text.ts). Either way undici writes it with an exact Content-Length.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT when the body cannot be serialised (a cycle, a nested bigint).
 */
export function requestPayload(body: JsonObject, extraFields?: JsonObject): string | Buffer {
  try {
    // A body whose members are known (a large one, parsed off the main thread): slices of its JSON.
    const written = writeJsonWith(body, extraFields);
    if (written !== undefined) return written;
    if (extraFields === undefined) return jsonTextOf(body) ?? JSON.stringify(body);
    const appended = appendedFields(body, extraFields);
    if (appended !== undefined) return appended;
    const merged: Record<string, unknown> = { ...body };
    let bigints: string | undefined;
    for (const key of Object.keys(extraFields)) {
      const value = extraFields[key];
      if (typeof value === 'bigint') {
        merged[key] = undefined;
        bigints = `${bigints === undefined ? '' : `${bigints},`}${JSON.stringify(key)}:${value.toString()}`;
      } else {
        merged[key] = value;
      }
    }
    const json = JSON.stringify(merged);
    if (bigints === undefined) return json;
    return json === '{}' ? `{${bigints}}` : `${json.slice(0, -1)},${bigints}}`;
  } catch (err) {
    throw new KvgateError(
      'KVG_ERR_INVALID_ARGUMENT',
      `request body cannot be serialised as JSON: ${err instanceof Error ? err.message : String(err)}`,
      undefined,
      {
        cause: err,
      },
    );
  }
}

/**
 * `requestPayload` as text (bytes decoded), for inspection and tests.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT as `requestPayload`.
 */
export function serializeBody(body: JsonObject, extraFields?: JsonObject): string {
  const payload = requestPayload(body, extraFields);
  return typeof payload === 'string' ? payload : payload.toString('utf8');
}

/**
 * The body with `extraFields` written after it as text, when none of them changes a member of the body: the
 * same bytes as serialising the merged object (the body's members, then the new ones in order, then the
 * bigints), without copying the body. A field equal to the body's member (a primitive, strictly equal: the
 * `stream: true` a streaming client already sent) leaves it where it stands, as the merged object would.
 * Undefined when a field replaces or removes a member of the body.
 */
function appendedFields(body: JsonObject, extraFields: JsonObject): string | undefined {
  let tail = '';
  let bigints = '';
  for (const key of Object.keys(extraFields)) {
    const value = extraFields[key];
    if (Object.hasOwn(body, key)) {
      if (value === body[key] && isPrimitive(value)) continue;
      return undefined;
    }
    if (typeof value === 'bigint') {
      bigints += `,${JSON.stringify(key)}:${value.toString()}`;
      continue;
    }
    // What JSON.stringify leaves out of an object (undefined, functions, symbols) is left out here too.
    const json = JSON.stringify(value) as string | undefined;
    if (json !== undefined) tail += `,${JSON.stringify(key)}:${json}`;
  }
  tail += bigints;
  // The client's own text when the body is its unchanged parse (common's json-text.ts): the same members, not re-serialised.
  const json = jsonTextOf(body) ?? JSON.stringify(body);
  if (tail === '') return json;
  return isEmpty(body) ? `{${tail.slice(1)}}` : `${json.slice(0, json.lastIndexOf('}'))}${tail}}`;
}

/** A value JSON writes the same for any two that are `===` (undefined and bigints are handled by the caller). */
function isPrimitive(value: unknown): boolean {
  return typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean' || value === null;
}

function isEmpty(body: JsonObject): boolean {
  for (const _k in body) return false;
  return true;
}

/** The body an engine receives for `body` plus `extraFields`, as an object (for inspection and tests). */
export function applyFields(body: JsonObject, extraFields?: JsonObject): Record<string, unknown> {
  const merged: Record<string, unknown> = { ...body };
  if (extraFields === undefined) return merged;
  for (const key of Object.keys(extraFields)) {
    const value = extraFields[key];
    if (value === undefined) delete merged[key];
    else merged[key] = value;
  }
  return merged;
}
