/**
 * Which failures a leg may resume from on another worker: `isMigratable` reads the error table's `migratable`
 * column, so the set below is the one the router migrates on, pinned as it was when the router kept its own list.
 */
import { describe, expect, it } from 'vitest';
import { EngineHttpError, EngineStreamError, isMigratable } from '../../src/engines/index.js';
import { ERROR_CODES, KvgateError, type KvgateErrorCode } from '../../src/errors/index.js';

const MIGRATABLE: readonly KvgateErrorCode[] = [
  'KVG_ERR_ENGINE_UNREACHABLE',
  'KVG_ERR_ENGINE_NOT_REGISTERED',
  'KVG_ERR_ENGINE_DISCONNECTED',
  'KVG_ERR_ENGINE_HEADERS_TIMEOUT',
  'KVG_ERR_ENGINE_BODY_TIMEOUT',
  'KVG_ERR_ENGINE_STREAM_BROKEN',
];

const ctx = { worker: 'worker 1', path: '/v1/completions' };

function httpError(status: number): EngineHttpError {
  return new EngineHttpError(
    ctx,
    status,
    { 'content-type': 'application/json' },
    new TextEncoder().encode('{"error":"x"}'),
    false,
  );
}

describe('isMigratable', () => {
  it('a plain error of each code is migratable exactly when its code is in the pinned set', () => {
    const codes = Object.keys(ERROR_CODES) as KvgateErrorCode[];
    expect(codes.filter((code) => isMigratable(new KvgateError(code, 'x'))).sort()).toEqual([...MIGRATABLE].sort());
    expect(codes.filter((code) => ERROR_CODES[code].migratable).sort()).toEqual([...MIGRATABLE].sort());
  });

  it('an error that says so itself is migratable whatever its code', () => {
    expect(isMigratable(new KvgateError('KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT', 'x', { migratable: true }))).toBe(true);
    expect(isMigratable(new KvgateError('KVG_ERR_ENGINE_FIRST_BYTE_TIMEOUT', 'x'))).toBe(false);
  });

  it('an engine HTTP error is migratable on 500, 502, 503 and 504 only', () => {
    const statuses = [400, 404, 429, 500, 501, 502, 503, 504, 505];
    expect(statuses.filter((s) => isMigratable(httpError(s)))).toEqual([500, 502, 503, 504]);
  });

  it("an engine's error event mid-stream is migratable when its code is 500, 502, 503 or 504: the engine failed", () => {
    const worker = { id: 1, url: 'http://10.0.0.1:8000' };
    const codes = [400, 413, 500, 501, 502, 503, 504, 505, 'internal', undefined];
    const migratable = codes.filter((code) => isMigratable(new EngineStreamError({ message: 'x', code }, worker)));
    expect(migratable).toEqual([500, 502, 503, 504]);
  });

  it('anything but a KvgateError is not', () => {
    expect(isMigratable(new Error('ECONNRESET'))).toBe(false);
    expect(isMigratable(undefined)).toBe(false);
  });
});
