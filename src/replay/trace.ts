/**
 * Loading Mooncake-format request traces (JSON Lines, one request per line):
 *
 *   {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48, 2353]}
 *
 * `timestamp` is the arrival in ms from the start of the trace (Dynamo's replay
 * also accepts `delay`, ms after the previous request, instead); `hash_ids` has
 * one id per `traceBlockSize`-token block including the final partial one, and
 * an id stands for the whole prefix up to its block (ids chain).
 *
 * Validation is per line, and a bad line never costs a good one: each problem
 * is reported with its 1-based line number and the line is skipped, or, with
 * `strict`, the whole trace is rejected with every problem listed. Checked:
 * JSON syntax, missing fields, wrong types, negative or zero lengths,
 * timestamps going backwards (against the last accepted line), and
 * `hash_ids.length != ceil(input_length / traceBlockSize)`. Blank lines are
 * ignored.
 */
import { readFileSync } from 'node:fs';
import { KvgateError } from '../errors/index.js';

/** One valid trace record. */
export interface TraceRecord {
  /** 1-based line number in the file (for messages). */
  readonly line: number;
  /** Arrival in ms from the start of the trace, as recorded. */
  readonly timestampMs: number;
  readonly inputLength: number;
  readonly outputLength: number;
  readonly hashIds: readonly number[];
}

export type TraceIssueKind =
  | 'invalid_json'
  | 'not_an_object'
  | 'missing_field'
  | 'invalid_value'
  | 'negative_length'
  | 'non_monotonic_timestamp'
  | 'hash_ids_length';

/** A problem with one line; the line was skipped. */
export interface TraceIssue {
  readonly line: number;
  readonly kind: TraceIssueKind;
  readonly message: string;
}

export interface LoadedTrace {
  readonly records: readonly TraceRecord[];
  readonly issues: readonly TraceIssue[];
  /** Non-blank lines read. */
  readonly linesRead: number;
  readonly traceBlockSize: number;
}

export interface TraceLoadOptions {
  /** Tokens per hash id (512 in the public Mooncake traces). */
  traceBlockSize?: number;
  /** Reject the whole trace on the first problem found (all problems are listed in the error). */
  strict?: boolean;
  /** Shown in error messages (the file name). */
  source?: string;
}

export const DEFAULT_TRACE_BLOCK_SIZE = 512;

/** Problems listed in a strict-mode error message before "... and N more". */
const MAX_ISSUES_IN_MESSAGE = 20;

function isNonNegativeInteger(v: unknown): v is number {
  return typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;
}

type LineResult =
  | { readonly ok: true; readonly ts: number; readonly isl: number; readonly osl: number; readonly ids: number[] }
  | { readonly ok: false; readonly kind: TraceIssueKind; readonly message: string };

function bad(kind: TraceIssueKind, message: string): LineResult {
  return { ok: false, kind, message };
}

/** A line's arrival: its `timestamp`, or its `delay` after the previous valid record (after 0 for the first). */
function arrivalOf(o: Record<string, unknown>, lastTimestamp: number, first: boolean): number | LineResult {
  if (o.timestamp !== undefined) {
    if (typeof o.timestamp !== 'number' || !Number.isFinite(o.timestamp) || o.timestamp < 0) {
      return bad('invalid_value', `timestamp must be a number >= 0, got ${JSON.stringify(o.timestamp)}`);
    }
    return o.timestamp;
  }
  if (typeof o.delay !== 'number' || !Number.isFinite(o.delay) || o.delay < 0) {
    return bad('invalid_value', `delay must be a number >= 0, got ${JSON.stringify(o.delay)}`);
  }
  return (first ? 0 : lastTimestamp) + o.delay;
}

/** Validates one non-blank line, checks in a fixed order (the first failing one is reported). */
function parseLine(raw: string, blockSize: number, lastTimestamp: number, first: boolean): LineResult {
  let value: unknown;
  try {
    value = JSON.parse(raw);
  } catch (err) {
    return bad('invalid_json', `not valid JSON (${err instanceof Error ? err.message : String(err)})`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return bad('not_an_object', 'expected a JSON object');
  const o = value as Record<string, unknown>;
  const missing = ['input_length', 'output_length', 'hash_ids'].filter((k) => o[k] === undefined);
  if (o.timestamp === undefined && o.delay === undefined) missing.unshift('timestamp');
  if (missing.length > 0) return bad('missing_field', `missing ${missing.join(', ')}`);
  const ts = arrivalOf(o, lastTimestamp, first);
  if (typeof ts !== 'number') return ts;
  const isl = o.input_length;
  const osl = o.output_length;
  if (typeof isl === 'number' && isl < 0) return bad('negative_length', `input_length is negative (${isl})`);
  if (typeof osl === 'number' && osl < 0) return bad('negative_length', `output_length is negative (${osl})`);
  if (!isNonNegativeInteger(isl) || isl === 0)
    return bad('invalid_value', `input_length must be an integer >= 1, got ${JSON.stringify(isl)}`);
  if (!isNonNegativeInteger(osl) || osl === 0)
    return bad('invalid_value', `output_length must be an integer >= 1, got ${JSON.stringify(osl)}`);
  const ids = o.hash_ids;
  if (!Array.isArray(ids) || !ids.every(isNonNegativeInteger))
    return bad('invalid_value', 'hash_ids must be an array of non-negative integers');
  const expected = Math.ceil(isl / blockSize);
  if (ids.length !== expected) {
    return bad(
      'hash_ids_length',
      `hash_ids has ${ids.length} ids but input_length ${isl} needs ceil(${isl} / ${blockSize}) = ${expected}`,
    );
  }
  if (ts < lastTimestamp)
    return bad('non_monotonic_timestamp', `timestamp ${ts} is earlier than the previous request's ${lastTimestamp}`);
  return { ok: true, ts, isl, osl, ids: ids as number[] };
}

/**
 * Parses and validates trace text.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for a bad traceBlockSize;
 *   KVG_ERR_INVALID_TRACE when `strict` and any line is bad, or when no valid record remains.
 */
export function parseTrace(text: string, opts: TraceLoadOptions = {}): LoadedTrace {
  const blockSize = opts.traceBlockSize ?? DEFAULT_TRACE_BLOCK_SIZE;
  if (!Number.isSafeInteger(blockSize) || blockSize < 1) {
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `trace block size must be a positive integer, got ${blockSize}`);
  }
  const records: TraceRecord[] = [];
  const issues: TraceIssue[] = [];
  let linesRead = 0;
  let lastTimestamp = -Infinity;
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i]!.trim();
    if (raw === '') continue;
    linesRead++;
    const line = i + 1;
    const r = parseLine(raw, blockSize, lastTimestamp, records.length === 0);
    if (!r.ok) {
      issues.push({ line, kind: r.kind, message: `line ${line}: ${r.message}` });
      continue;
    }
    lastTimestamp = r.ts;
    records.push({ line, timestampMs: r.ts, inputLength: r.isl, outputLength: r.osl, hashIds: r.ids });
  }
  const source = opts.source ?? 'trace';
  if (opts.strict === true && issues.length > 0) {
    const shown = issues.slice(0, MAX_ISSUES_IN_MESSAGE).map((x) => `  ${x.message}`);
    if (issues.length > MAX_ISSUES_IN_MESSAGE) shown.push(`  ... and ${issues.length - MAX_ISSUES_IN_MESSAGE} more`);
    throw new KvgateError(
      'KVG_ERR_INVALID_TRACE',
      `${source}: ${issues.length} invalid line(s) (strict mode):\n${shown.join('\n')}`,
      { source, issues: issues.length, firstLine: issues[0]!.line },
    );
  }
  if (records.length === 0) {
    throw new KvgateError('KVG_ERR_INVALID_TRACE', `${source}: no valid request in ${linesRead} line(s)`, {
      source,
      issues: issues.length,
    });
  }
  return { records, issues, linesRead, traceBlockSize: blockSize };
}

/**
 * Reads and validates a trace file (see `parseTrace`).
 * @throws KvgateError KVG_ERR_INVALID_TRACE when the file cannot be read, and as `parseTrace`.
 */
export function loadTrace(path: string, opts: Omit<TraceLoadOptions, 'source'> = {}): LoadedTrace {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new KvgateError(
      'KVG_ERR_INVALID_TRACE',
      `cannot read trace ${path}: ${err instanceof Error ? err.message : String(err)}`,
      { source: path },
      { cause: err },
    );
  }
  return parseTrace(text, { ...opts, source: path });
}
