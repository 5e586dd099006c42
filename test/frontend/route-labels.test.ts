/**
 * The route an HTTP request matched is `route` on `kvgate_http_requests_total` and `endpoint` on
 * `kvgate_request_duration_seconds` (both names are pinned by dashboards and tests; docs/metrics.md says which is
 * which): the two labels carry one value set, the route's path pattern, and count the same requests.
 */
import { describe, expect, it } from 'vitest';
import { sampleSum } from '../helpers/metric-sum.js';
import { chat, post, start } from './server-harness.js';

/** Each label value of `label` on `name`'s samples (histogram: its `_count`), with the sum of its samples. */
function byLabel(text: string, name: string, label: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const m of text.matchAll(new RegExp(`^${name}\\{[^}]*\\b${label}="([^"]*)"[^}]*\\} (\\S+)$`, 'gm')))
    out.set(m[1]!, (out.get(m[1]!) ?? 0) + Number(m[2]));
  return out;
}

describe('the route labels of the HTTP metrics', () => {
  it('route and endpoint name the same path patterns and count the same requests', async () => {
    const g = await start();
    await post(`${g.url}/v1/chat/completions`, chat('hello'));
    await post(`${g.url}/v1/chat/completions`, { model: 'demo' });
    await fetch(`${g.url}/v1/models/demo`);
    await fetch(`${g.url}/no/such/path`);
    const text = await (await fetch(`${g.url}/metrics`)).text();
    const routes = byLabel(text, 'kvgate_http_requests_total', 'route');
    const endpoints = byLabel(text, 'kvgate_request_duration_seconds_count', 'endpoint');
    expect(routes.get('/v1/chat/completions')).toBe(2);
    expect(routes.has('/v1/models/*')).toBe(true);
    expect(routes.has('unmatched')).toBe(true);
    expect(endpoints).toEqual(routes);
    expect(sampleSum(text, 'kvgate_request_duration_seconds_count', { endpoint: '/v1/chat/completions' })).toBe(2);
  });
});
