/**
 * One parse of a tokenizer.json per model load: readers in one synchronous job share the parse, and bad
 * files fail as JSON.parse would (the encoder's caller turns that into "no JavaScript encoder").
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
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
