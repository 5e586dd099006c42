import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startMocker, type MockerHandle } from '../../src/mocker/index.js';
import { buildWorkload, parseTrace, TokenSynthesizer } from '../../src/replay/index.js';
import { generateLoad, takeSseData } from '../../src/replay/load-generator.js';

describe('SSE framing', () => {
  it('splits events across chunk boundaries and CRLF framing, keeping only data payloads', () => {
    const st = { buffer: '' };
    expect(takeSseData(st, 'data: {"a":1}\n\nda')).toEqual(['{"a":1}']);
    expect(takeSseData(st, 'ta: {"b":2}\r\n\r\n: comment\n\ndata: [DONE]\n\n')).toEqual(['{"b":2}', '[DONE]']);
    expect(st.buffer).toBe('');
  });
});

describe('load generator against one mocker engine', () => {
  let engine: MockerHandle;
  beforeAll(async () => {
    engine = await startMocker({ speedup: 20, engineHashSeed: 1n });
  });
  afterAll(async () => {
    await engine.close();
  });

  it("keeps arrival times, streams every token and reads the engine's cached tokens", async () => {
    const rows = [
      { timestamp: 0, input_length: 1000, output_length: 5, hash_ids: [1, 2] },
      { timestamp: 100, input_length: 1500, output_length: 3, hash_ids: [1, 2, 3] },
      { timestamp: 150, input_length: 600, output_length: 4, hash_ids: [9, 10] },
    ];
    const workload = buildWorkload(parseTrace(rows.map((r) => JSON.stringify(r)).join('\n')));
    const progress: number[] = [];
    const run = await generateLoad(workload, {
      url: engine.url,
      model: engine.options.model,
      synth: new TokenSynthesizer({ traceBlockSize: 512, seed: 1 }),
      requestSeed: (i) => i,
      bucketMs: 100,
      onDone: (d) => progress.push(d),
    });
    expect(progress).toEqual([1, 2, 3]);
    for (const o of run.outcomes) {
      expect(o.error).toBeNull();
      expect(o.firstTokenMs!).toBeGreaterThan(o.arrivalMs);
      expect(o.finishMs!).toBeGreaterThanOrEqual(o.firstTokenMs!);
      expect(o.outputTokens).toBe(o.expectedOutputTokens);
    }
    // Sent no earlier than their arrival times.
    expect(run.outcomes[1]!.arrivalMs).toBeGreaterThanOrEqual(100);
    expect(run.outcomes[2]!.arrivalMs).toBeGreaterThanOrEqual(150);
    // The second request shares the first's 1,000 tokens: 62 full blocks of 16 are cached (if the first was done).
    expect(run.outcomes[0]!.cachedTokens).toBe(0);
    expect([0, 992]).toContain(run.outcomes[1]!.cachedTokens);
    expect(run.hits.promptTokens).toBe(3100);
  });

  it('records HTTP errors per request and carries on', async () => {
    const workload = buildWorkload(
      parseTrace(JSON.stringify({ timestamp: 0, input_length: 10, output_length: 2, hash_ids: [1] })),
    );
    const run = await generateLoad(workload, {
      url: engine.url,
      model: 'no-such-model',
      synth: new TokenSynthesizer({ traceBlockSize: 512 }),
      requestSeed: () => 1,
      bucketMs: 100,
    });
    expect(run.outcomes[0]!.error).toMatch(/^HTTP 4\d\d/);
  });
});
