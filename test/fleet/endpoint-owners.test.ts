/**
 * `EndpointOwners`: of two listed pods with one endpoint (an IP reused while the old pod is still listed) the newer
 * owns it, whatever the list's order; the owner leaving hands the endpoint back to the pod still listed; each change
 * is one line. (`kvgate picker` and the Kubernetes source of `kvgate serve` share it: test/picker/endpoint-handover.test.ts
 * and test/integration/discovery/kubernetes-address.test.ts.)
 */
import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { EndpointOwners } from '../../src/fleet/endpoint-owners.js';
import type { PoolEndpoint } from '../../src/fleet/index.js';

const X = '10.0.0.1:8000';
const Y = '10.0.0.2:8000';
const OLD: PoolEndpoint = { name: 'b-old', endpoint: X, created: '2026-01-01T00:00:00Z' };
const NEW: PoolEndpoint = { name: 'a-new', endpoint: X, created: '2026-01-01T00:10:00Z' };
const OTHER: PoolEndpoint = { name: 'c', endpoint: Y, created: '2026-01-01T00:00:00Z' };

function owners(): { owners: EndpointOwners; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const logger = pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s)) });
  return { owners: new EndpointOwners(logger), lines };
}

describe('EndpointOwners', () => {
  it('gives the endpoint to the pod created later, in either list order; the other is shadowed (a warn line)', () => {
    for (const list of [
      [NEW, OLD, OTHER],
      [OLD, NEW, OTHER],
    ]) {
      const { owners: o, lines } = owners();
      const got = o.apply(list);
      expect([...got.owners.keys()].sort()).toEqual(['a-new', 'c']);
      expect(got).toMatchObject({ handedOver: [], shadowed: ['b-old'] });
      expect(lines).toMatchObject([{ level: 40, pod: 'b-old', owner: 'a-new', endpoint: X }]);
      expect(o.sizes).toEqual({ listed: 3, shadowed: 1 });
    }
  });

  it('hands the endpoint to the newer pod, back to the old one when the newer leaves, and tells each change', () => {
    const { owners: o, lines } = owners();
    o.apply([OLD, OTHER]);
    expect(o.apply([OLD, NEW, OTHER])).toMatchObject({ handedOver: [{ endpoint: X, from: 'b-old', to: 'a-new' }] });
    expect(o.apply([OLD, NEW, OTHER])).toMatchObject({ handedOver: [], shadowed: [] });
    expect(o.apply([OLD, OTHER])).toMatchObject({ handedOver: [{ endpoint: X, from: 'a-new', to: 'b-old' }] });
    o.apply([OLD, NEW, OTHER]);
    o.apply([NEW, OTHER]);
    expect(o.sizes).toEqual({ listed: 2, shadowed: 0 });
    expect(lines.map((l) => [l['level'], l['msg']])).toEqual([
      [40, expect.stringMatching(/^endpoint 10.0.0.1:8000 handed over from pod b-old to pod a-new: both are listed/)],
      [30, 'endpoint 10.0.0.1:8000 handed over from pod a-new to pod b-old (a-new is not listed)'],
      [40, expect.stringMatching(/^endpoint 10.0.0.1:8000 handed over from pod b-old to pod a-new: both are listed/)],
      [30, 'pod b-old (not routed: a newer pod owns its endpoint 10.0.0.1:8000) is no longer listed'],
    ]);
  });

  it('without creation times, the pod listed later owns the endpoint', () => {
    const { owners: o } = owners();
    o.apply([{ name: 'z', endpoint: X }]);
    expect([
      ...o
        .apply([
          { name: 'a', endpoint: X },
          { name: 'z', endpoint: X },
        ])
        .owners.keys(),
    ]).toEqual(['a']);
  });

  it('a pod the API marks terminating is older than one that is not, whatever their creation or listing', () => {
    const { owners: o } = owners();
    o.apply([NEW]);
    const got = o.apply([{ ...NEW, terminating: true }, OLD]);
    expect([...got.owners.keys()]).toEqual(['b-old']);
    expect(got.handedOver).toEqual([{ endpoint: X, from: 'a-new', to: 'b-old' }]);
  });
});
