import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { ERROR_CODES, KvgateError, isKvgateError } from '../../src/errors/index.js';

describe('error codes', () => {
  it('every code is documented in docs/errors.md and every documented code exists', () => {
    const doc = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');
    const documented = [...doc.matchAll(/^## (KVG_ERR_[A-Z0-9_]+)\s*$/gm)].map((m) => m[1]);
    expect(new Set(documented).size).toBe(documented.length);
    expect([...documented].sort()).toEqual(Object.keys(ERROR_CODES).sort());
  });

  it('docs/errors.md lists the retryable and the migratable codes as the table has them', () => {
    const doc = readFileSync(new URL('../../docs/errors.md', import.meta.url), 'utf8');
    const listed = (label: string): string[] => {
      const para = new RegExp(`${label} codes:([^.;]*)`).exec(doc)?.[1] ?? '';
      return [...para.matchAll(/`(KVG_ERR_[A-Z0-9_]+)`/g)].map((m) => m[1]!).sort();
    };
    const codes = Object.keys(ERROR_CODES) as (keyof typeof ERROR_CODES)[];
    expect(listed('Retryable')).toEqual(codes.filter((c) => ERROR_CODES[c].retryable).sort());
    expect(listed('Migratable')).toEqual(codes.filter((c) => ERROR_CODES[c].migratable).sort());
  });

  it('errors carry code, status, type and the brand', () => {
    const e = new KvgateError('KVG_ERR_INVALID_TOKEN', 'bad token', { index: 3 });
    expect(e).toBeInstanceOf(Error);
    expect(e instanceof KvgateError).toBe(true);
    expect(isKvgateError(e, 'KVG_ERR_INVALID_TOKEN')).toBe(true);
    expect(isKvgateError(e, 'KVG_ERR_WASM')).toBe(false);
    expect(isKvgateError(new Error('x'))).toBe(false);
    expect(e.statusCode).toBe(400);
    expect(e.type).toBe('invalid_request_error');
    expect(e.detail).toEqual({ index: 3 });
    for (const [code, info] of Object.entries(ERROR_CODES)) {
      expect(code).toMatch(/^KVG_ERR_[A-Z0-9_]+$/);
      expect(info.status).toBeGreaterThanOrEqual(400);
    }
  });
});

describe('brand checks and subclasses', () => {
  it('instanceof a subclass is a prototype check, not the brand', () => {
    class SubError extends KvgateError {}
    const base = new KvgateError('KVG_ERR_WASM', 'x');
    const sub = new SubError('KVG_ERR_WASM', 'y');
    expect(sub instanceof KvgateError).toBe(true);
    expect(sub instanceof SubError).toBe(true);
    expect(base instanceof SubError).toBe(false);
  });
});
