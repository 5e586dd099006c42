/**
 * The metric names the prose cites (README.md, docs/*.md, each src/ folder's README) are rows of docs/metrics.md's
 * table, and the label keys a citation spells out (`kvgate_x_total{reason="y"}`) are that row's labels; the table
 * itself is kept equal to what `/metrics` exports by exported.test.ts. A name ending in `*` or `_` is a family
 * (`kvgate_kv_event*`), not a citation.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { documentedMetrics } from './catalog.js';

const ROOT = new URL('../../', import.meta.url).pathname;

function readmesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return readmesUnder(p);
    return name === 'README.md' ? [p] : [];
  });
}

function proseFiles(): string[] {
  const docs = readdirSync(join(ROOT, 'docs'))
    .filter((n) => n.endsWith('.md'))
    .map((n) => join(ROOT, 'docs', n));
  return [join(ROOT, 'README.md'), ...docs, ...readmesUnder(join(ROOT, 'src'))];
}

/** The label keys of a citation's braces: `model,reason=a|b` and `reason="x, y"` alike. */
function labelKeys(braces: string): string[] {
  const parts = braces.split(/,(?=(?:[^"]*"[^"]*")*[^"]*$)/);
  return parts.map((p) => /^\s*([a-z_]+)/.exec(p)?.[1]).filter((k): k is string => k !== undefined);
}

/** Every citation of a metric in `text` that the table does not hold, as `name` or `name{key}`. */
function strayReferences(text: string, labels: ReadonlyMap<string, readonly string[]>): string[] {
  const out: string[] = [];
  for (const m of text.matchAll(/\b(kvgate_[a-z0-9_]*[a-z0-9])(\*)?(?:\{([^}]*)\})?/g)) {
    const [, cited, family, braces] = m;
    if (family !== undefined || text[m.index + m[0].length] === '_') continue;
    const name = labels.has(cited!) ? cited! : cited!.replace(/_(bucket|sum|count)$/, '');
    const known = labels.get(name);
    if (known === undefined) {
      out.push(cited!);
      continue;
    }
    for (const key of braces === undefined ? [] : labelKeys(braces))
      if (key !== 'le' && !known.includes(key)) out.push(`${cited}{${key}}`);
  }
  return out;
}

describe('metric names in the docs', () => {
  const labels = new Map(documentedMetrics().map((d) => [d.name, d.labels]));

  it('every metric the prose cites is in docs/metrics.md, with the labels it names', () => {
    const stray = proseFiles().flatMap((f) =>
      strayReferences(readFileSync(f, 'utf8'), labels).map((r) => `${relative(ROOT, f)}: ${r}`),
    );
    expect(stray).toEqual([]);
  });

  it('the check flags a name the table lacks and a label its row lacks, and passes families and suffixes', () => {
    const table = new Map([
      ['kvgate_a_total', ['reason']],
      ['kvgate_b_seconds', ['model']],
    ]);
    expect(strayReferences('`kvgate_gone_total` and `kvgate_a_total{code="x"}`', table)).toEqual([
      'kvgate_gone_total',
      'kvgate_a_total{code}',
    ]);
    const fine =
      '`kvgate_a_total{reason="p, q"}`, `kvgate_b_seconds_bucket{model,le}`, `kvgate_a*`, `kvgate_b_` series';
    expect(strayReferences(fine, table)).toEqual([]);
  });
});
