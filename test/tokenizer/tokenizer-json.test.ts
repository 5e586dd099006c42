/**
 * One parse of a tokenizer.json per model load: readers in one synchronous job share the parse, and bad
 * files fail as JSON.parse would (the encoder's caller turns that into "no JavaScript encoder").
 */
import { mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { demoTokenizerFiles, tokenizerJsonOf } from '../../src/tokenizer/index.js';

describe('tokenizerJsonOf', () => {
  it('hands every reader in one synchronous job the same parse', () => {
    const path = demoTokenizerFiles().tokenizerJson;
    const a = tokenizerJsonOf(path) as { model?: { type?: string } };
    expect(a.model?.type).toBe('BPE');
    expect(tokenizerJsonOf(path)).toBe(a);
  });

  it('reparses a file rewritten in place while its old parse is still held (a model reloaded with a new tokenizer)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvgate-tokjson-'));
    try {
      const path = join(dir, 'tokenizer.json');
      writeFileSync(path, '{"version": "1"}');
      const before = tokenizerJsonOf(path);
      expect(before).toEqual({ version: '1' });
      // The same length, so only the modification time tells the two files apart; set apart explicitly, as
      // two writes in one millisecond would share it.
      writeFileSync(path, '{"version": "2"}');
      utimesSync(path, new Date(2_000_000_000_000), new Date(2_000_000_000_000));
      expect(tokenizerJsonOf(path)).toEqual({ version: '2' });
      expect(before).toEqual({ version: '1' });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reads a file it has not seen, and refuses one that is not a JSON object', () => {
    const dir = mkdtempSync(join(tmpdir(), 'kvgate-tokjson-'));
    try {
      const ok = join(dir, 'ok.json');
      writeFileSync(ok, '{"added_tokens": []}');
      expect(tokenizerJsonOf(ok)).toEqual({ added_tokens: [] });
      const bad = join(dir, 'bad.json');
      writeFileSync(bad, '{"added_tokens": [');
      expect(() => tokenizerJsonOf(bad)).toThrow(SyntaxError);
      const scalar = join(dir, 'scalar.json');
      writeFileSync(scalar, '42');
      expect(() => tokenizerJsonOf(scalar)).toThrow(TypeError);
      expect(() => tokenizerJsonOf(join(dir, 'missing.json'))).toThrow(/ENOENT/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
