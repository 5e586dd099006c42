/**
 * kvgate's own text (docs, help, log and bench output, code comments) speaks
 * of kvgate alone: no paths into documents outside the repository, no
 * tracker numbers or section numbers of internal documents.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = new URL('../../', import.meta.url).pathname;

/** Text files under `dir` with one of `exts`. */
function files(dir: string, exts: readonly string[]): string[] {
  const out: string[] = [];
  for (const name of readdirSync(join(ROOT, dir))) {
    const path = join(dir, name);
    if (statSync(join(ROOT, path)).isDirectory()) out.push(...files(path, exts));
    else if (exts.some((e) => name.endsWith(e))) out.push(path);
  }
  return out;
}

const FORBIDDEN: readonly [RegExp, string][] = [
  [/\bshared\/(?:traces|design|reference|gpu-profiles)\b/, 'a path outside the repository'],
  [/\bspec section\b|\bSpec \d+(?:\.\d+)*\b/i, 'a section of an internal spec'],
  [/\(issue \d+\)|\bIssue \d+\b/, 'a tracker number'],
  [/[\w-]+\.md sections? \d/, 'a section of an internal document'],
  [/\b(?:engine-wire-formats|dynamo-router|peers|style-anchors)\.md\b|\bARCHITECTURE\.md\b/, 'an internal document'],
];

describe('user-facing text names no internal documents', () => {
  // issue 17 ("A CLI and docs that behave"): docs, bench output and code speak of kvgate alone.
  it('README, CHANGELOG, BENCHMARKS, docs, profiles, data, src and bench', () => {
    const checked = [
      'README.md',
      'CHANGELOG.md',
      'BENCHMARKS.md',
      // docs/replay/<run>/ hold recorded runs (the command as typed is provenance); their README is prose.
      ...files('docs', ['.md']).filter((f) => !/^docs\/replay\/[^/]+\//.test(f)),
      ...files('profiles', ['.md']),
      ...files('data', ['.md']),
      ...files('src', ['.ts', '.md']),
      ...files('bench', ['.ts']),
    ];
    expect(checked.length).toBeGreaterThan(50);
    const found: string[] = [];
    for (const f of checked) {
      readFileSync(join(ROOT, f), 'utf8')
        .split('\n')
        .forEach((line, i) => {
          for (const [re, what] of FORBIDDEN)
            if (re.test(line)) found.push(`${relative('.', f)}:${i + 1}: ${what}: ${line.trim()}`);
        });
    }
    expect(found).toEqual([]);
  });
});
