/**
 * Imports point downward (docs/architecture.md): each src/ layer may import
 * only the layers listed for it here. A new edge must be added on purpose,
 * and an edge that would close a cycle is refused. Root files (src/index.ts,
 * the library face; src/version.ts, a leaf) are not layers.
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = new URL('../../src/', import.meta.url).pathname;

/** Allowed dependencies per layer (leaves first). */
const ALLOWED: Record<string, readonly string[]> = {
  errors: [],
  // the vocabulary, clock, logger and context every layer shares
  common: ['errors'],
  metrics: ['common'],
  wasm: ['errors', 'common'],
  tokenizer: ['errors', 'common'],
  engines: ['errors', 'common'],
  discovery: ['errors', 'common'],
  core: ['errors', 'common', 'wasm'],
  events: ['errors', 'common', 'wasm', 'core'],
  mocker: ['errors', 'common', 'wasm', 'core', 'tokenizer'],
  config: ['errors', 'common', 'core', 'discovery', 'tokenizer'],
  routing: ['errors', 'common', 'wasm', 'core', 'engines', 'events', 'discovery', 'metrics'],
  // the fleet of one gateway: membership, discovery sources, engine checks, health, replica sync, a router per model.
  fleet: ['errors', 'common', 'config', 'discovery', 'engines', 'metrics', 'replicas', 'routing'],
  // the frontend shows the fleet's status and hands it each model's services (types only).
  frontend: ['errors', 'common', 'wasm', 'core', 'tokenizer', 'config', 'metrics', 'routing', 'fleet'],
  // replay drives the mocker cores and the routers offline; the online runner composes the gateway and lives in cli.
  replay: ['errors', 'common', 'core', 'events', 'mocker', 'routing'],
  // replica sync: other replicas' bookings and sessions into core's peer view, over NATS or the cluster IPC channel.
  replicas: ['errors', 'common', 'core', 'metrics'],
  // the endpoint picker: the gateway's preprocessing and router behind Envoy's ext_proc, for a GIE data plane.
  picker: ['errors', 'common', 'core', 'wasm', 'config', 'metrics', 'routing', 'fleet', 'frontend'],
  cli: ['errors', 'common', 'config', 'fleet', 'frontend', 'mocker', 'picker', 'replay', 'replicas'],
};

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
  });
}

describe('layering', () => {
  it('every src/ folder is a known layer', () => {
    const layers = readdirSync(SRC).filter((n) => statSync(join(SRC, n)).isDirectory());
    expect(layers.sort()).toEqual(Object.keys(ALLOWED).sort());
  });

  it('imports between layers follow the allowed edges', () => {
    const violations: string[] = [];
    for (const file of files(SRC)) {
      const layer = relative(SRC, file).split('/')[0]!;
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(/from '((?:\.\.\/)+)([a-z]+)\//g)) {
        const depth = m[1]!.length / 3;
        const fileDepth = relative(SRC, file).split('/').length - 1;
        if (depth !== fileDepth) continue; // a relative path inside the same layer
        const target = m[2]!;
        if (target !== layer && !ALLOWED[layer]!.includes(target))
          violations.push(`${relative(SRC, file)} -> ${target}`);
      }
    }
    expect(violations).toEqual([]);
  });

  it("imports between layers go through the target folder's index.ts", () => {
    const violations: string[] = [];
    for (const file of files(SRC)) {
      const rel = relative(SRC, file);
      const layer = rel.split('/')[0]!;
      const fileDepth = rel.split('/').length - 1;
      for (const m of readFileSync(file, 'utf8').matchAll(/from '((?:\.\.\/)+)([a-z]+)\/([^']+)'/g)) {
        if (m[1]!.length / 3 !== fileDepth || m[2] === layer) continue; // inside the same layer
        if (m[3] !== 'index.js') violations.push(`${rel} -> ${m[2]}/${m[3]}`);
      }
    }
    expect(violations).toEqual([]);
  });

  it('the allowed edges have no cycle', () => {
    const state = new Map<string, 'visiting' | 'done'>();
    const visit = (n: string, path: string[]): void => {
      if (state.get(n) === 'done') return;
      if (state.get(n) === 'visiting') throw new Error(`cycle: ${[...path, n].join(' -> ')}`);
      state.set(n, 'visiting');
      for (const d of ALLOWED[n]!) visit(d, [...path, n]);
      state.set(n, 'done');
    };
    for (const n of Object.keys(ALLOWED)) visit(n, []);
  });
});
