import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { isKvgateError } from '../../src/errors/index.js';
import { loadTrace, parseTrace } from '../../src/replay/index.js';

const BAD = new URL('../fixtures/traces/bad-lines.jsonl', import.meta.url);
const SMALL = new URL('../fixtures/traces/small.jsonl', import.meta.url);

describe('trace loading', () => {
  it('reads every record of a valid trace in order', () => {
    const t = loadTrace(SMALL.pathname);
    expect(t.issues).toEqual([]);
    expect(t.records).toHaveLength(80);
    expect(t.linesRead).toBe(80);
    expect(t.records[0]).toEqual({
      line: 1,
      timestampMs: 19,
      inputLength: 1206,
      outputLength: 33,
      hashIds: [42, 43, 44],
    });
    for (let i = 1; i < t.records.length; i++)
      expect(t.records[i]!.timestampMs).toBeGreaterThanOrEqual(t.records[i - 1]!.timestampMs);
  });

  it('reports each bad line with its number and reason, skips it, and keeps every good line', () => {
    const t = loadTrace(BAD.pathname);
    expect(t.records.map((r) => r.line)).toEqual([1, 4, 11]);
    expect(t.issues.map((i) => [i.line, i.kind])).toEqual([
      [2, 'missing_field'],
      [3, 'negative_length'],
      [6, 'non_monotonic_timestamp'],
      [7, 'hash_ids_length'],
      [8, 'invalid_json'],
      [9, 'negative_length'],
      [10, 'not_an_object'],
    ]);
    expect(t.issues[0]!.message).toBe('line 2: missing output_length');
    expect(t.issues[1]!.message).toBe('line 3: input_length is negative (-5)');
    expect(t.issues[2]!.message).toBe("line 6: timestamp 25 is earlier than the previous request's 30");
    expect(t.issues[3]!.message).toContain('hash_ids has 2 ids but input_length 1500 needs ceil(1500 / 512) = 3');
    // The blank line 5 is neither a record nor an issue.
    expect(t.linesRead).toBe(10);
  });

  it('rejects the whole trace with --strict, listing every bad line', () => {
    let caught: unknown;
    try {
      loadTrace(BAD.pathname, { strict: true });
    } catch (err) {
      caught = err;
    }
    expect(isKvgateError(caught, 'KVG_ERR_INVALID_TRACE')).toBe(true);
    const msg = (caught as Error).message;
    expect(msg).toContain('7 invalid line(s) (strict mode)');
    for (const n of [2, 3, 6, 7, 8, 9, 10]) expect(msg).toContain(`line ${n}:`);
  });

  it('checks hash_ids against the configured trace block size', () => {
    const line = JSON.stringify({ timestamp: 0, input_length: 100, output_length: 1, hash_ids: [1, 2] });
    expect(() => parseTrace(line)).toThrow(/no valid request/);
    expect(parseTrace(line, { traceBlockSize: 64 }).records).toHaveLength(1);
  });

  it('accepts delay (ms after the previous request) instead of timestamp', () => {
    const text = [
      JSON.stringify({ delay: 5, input_length: 10, output_length: 1, hash_ids: [1] }),
      JSON.stringify({ delay: 20, input_length: 10, output_length: 1, hash_ids: [2] }),
    ].join('\n');
    expect(parseTrace(text).records.map((r) => r.timestampMs)).toEqual([5, 25]);
  });

  it('fails clearly on an unreadable file or a trace without any valid request', () => {
    expect(() => loadTrace('/nonexistent/trace.jsonl')).toThrow(/cannot read trace/);
    expect(() => parseTrace('\n\n')).toThrow(/no valid request/);
    expect(() => parseTrace('x', { traceBlockSize: 0 })).toThrow(/trace block size/);
  });

  it('the fixture is what the tests say it is', () => {
    expect(readFileSync(SMALL, 'utf8').trim().split('\n')).toHaveLength(80);
  });
});
