/**
 * Every folder of src/ (itself and each folder below it) and of workers/ that
 * holds `.ts` files has a README.md that names each of those files, so a
 * reader who opens a folder finds what every file in it owns.
 *
 * A file counts as named when the README has it in backticks, by its name
 * (`` `migration.ts` ``) or by a path ending in it that is a tail of the
 * file's own path (`` `push/migration.ts` ``, `` `src/routing/push/migration.ts` ``).
 * Only the folder's own README counts: a parent's README pointing to a
 * child's files does not stand in for the child's README.
 */
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = new URL('../../', import.meta.url).pathname;

/** `dir` and every folder below it. */
function folders(dir: string): string[] {
  const below = readdirSync(dir)
    .sort()
    .map((name) => join(dir, name))
    .filter((p) => statSync(p).isDirectory());
  return [dir, ...below.flatMap(folders)];
}

/** The backticked spans of a Markdown text. */
function codeSpans(markdown: string): Set<string> {
  return new Set([...markdown.matchAll(/`([^`\n]+)`/g)].map((m) => m[1]!.trim()));
}

function names(spans: Set<string>, relPath: string): boolean {
  for (const span of spans) if (span === relPath || relPath.endsWith(`/${span}`)) return true;
  return false;
}

/**
 * The (folder, file) pairs the READMEs under `roots` leave out, relative to
 * `root`; a folder without a README misses every one of its files.
 */
function unnamedFiles(root: string, roots: string[]): string[] {
  const missing: string[] = [];
  for (const dir of roots.flatMap((r) => folders(join(root, r)))) {
    const sources = readdirSync(dir)
      .filter((n) => n.endsWith('.ts') && statSync(join(dir, n)).isFile())
      .sort();
    if (sources.length === 0) continue;
    const readme = join(dir, 'README.md');
    let spans: Set<string> | undefined;
    try {
      spans = codeSpans(readFileSync(readme, 'utf8'));
    } catch {
      spans = undefined;
    }
    const folder = relative(root, dir);
    for (const file of sources) {
      if (spans === undefined) missing.push(`${folder}: ${file} (no README.md)`);
      else if (!names(spans, `${folder}/${file}`)) missing.push(`${folder}: ${file}`);
    }
  }
  return missing;
}

describe('folder READMEs', () => {
  it('every folder of src/ and workers/ with .ts files has a README.md naming each of them', () => {
    expect(unnamedFiles(ROOT, ['src', 'workers'])).toEqual([]);
  });

  it('the check reports a file its README leaves out, and a folder without a README', () => {
    const root = mkdtempSync(join(tmpdir(), 'kvgate-readmes-'));
    try {
      mkdirSync(join(root, 'src', 'push'), { recursive: true });
      mkdirSync(join(root, 'src', 'bare'));
      mkdirSync(join(root, 'src', 'docs-only'));
      writeFileSync(join(root, 'src', 'index.ts'), '');
      writeFileSync(join(root, 'src', 'README.md'), '- `index.ts`: the library face; `push/` has its own README.\n');
      for (const f of ['migration.ts', 'continuation.ts', 'retry.ts']) writeFileSync(join(root, 'src', 'push', f), '');
      // `retry.ts` is named by a subpath; `continuation.ts` only in prose, which does not count.
      writeFileSync(
        join(root, 'src', 'push', 'README.md'),
        '`migration.ts` and `src/push/retry.ts`; continuation.ts\n',
      );
      writeFileSync(join(root, 'src', 'bare', 'a.ts'), '');
      writeFileSync(join(root, 'src', 'docs-only', 'README.md'), 'no sources here\n');
      // A path that ends in the name but is not a tail of the file's path names another file.
      mkdirSync(join(root, 'src', 'other'));
      writeFileSync(join(root, 'src', 'other', 'retry.ts'), '');
      writeFileSync(join(root, 'src', 'other', 'README.md'), "`push/retry.ts` is push's\n");

      expect(unnamedFiles(root, ['src'])).toEqual([
        'src/bare: a.ts (no README.md)',
        'src/other: retry.ts',
        'src/push: continuation.ts',
      ]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
