/**
 * `kvgate picker`'s answer to a request it fails on, over real gRPC sockets
 * (the test plays Envoy) with a real preprocessing thread: the failure is an
 * unexpected error thrown on that thread (it was given the pool's model under
 * another name, so the body's model is not loaded there), which comes back as
 * KVG_ERR_INTERNAL with the thread's error as its cause. The client must get
 * what `kvgate serve` gives it (500, the fixed sentence, the request id), never
 * the thread's text; the log gets the cause under that request id; the count
 * is `internal_error`, not `bad_request`.
 */
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadGatewayConfig } from '../../../src/config/index.js';
import {
  createPreprocessor,
  preprocessModelSpecs,
  servedModelConfig,
  type Preprocessor,
} from '../../../src/frontend/index.js';
import { KvgateMetrics } from '../../../src/metrics/index.js';
import { systemClock, seededRng } from '../../../src/common/index.js';
import { PickerServer } from '../../../src/picker/server.js';
import { ExtProcClient, requestHeaders } from '../../helpers/ext-proc-client.js';
import { sampleSum } from '../../helpers/metric-sum.js';
import { until } from '../../helpers/until.js';
import { immediate } from './answers.js';

const MODEL = 'mock-model';

describe('kvgate picker: an internal error is answered as kvgate serve answers it, and logged', () => {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const l of chunk.toString().split('\n')) if (l !== '') lines.push(JSON.parse(l) as Record<string, unknown>);
      done();
    },
  });
  const metrics = new KvgateMetrics();
  let preprocessor: Preprocessor;
  let server: PickerServer;
  let client: ExtProcClient;

  beforeAll(async () => {
    const config = loadGatewayConfig({
      env: {},
      base: {
        models: [
          {
            name: MODEL,
            tokenizer: 'demo',
            router: { use_kv_events: false },
            inference_pool: { api_server: 'http://127.0.0.1:1', name: 'pool', token_file: '/x', ca_file: '/x' },
          },
        ],
      },
    });
    const model = config.models[0]!;
    // The thread loads the model under another name: the body it is given names a model it does not have.
    const specs = preprocessModelSpecs(config).map((s) => ({ ...s, name: 'another-model' }));
    preprocessor = await createPreprocessor(specs, { threads: 1 });
    server = new PickerServer({
      model: servedModelConfig(model),
      preprocessor,
      metrics,
      logger: pino({ level: 'debug' }, sink),
      clock: systemClock,
      rng: seededRng(1),
      fallbacks: 1,
      maxBodyBytes: config.limits.maxBodyBytes,
      maxMessages: config.limits.maxMessages,
    });
    server.setEndpoints([{ name: 'pod-0', endpoint: '10.0.0.1:8000' }]);
    client = new ExtProcClient(`127.0.0.1:${await server.listen('127.0.0.1', 0)}`);
  }, 60_000);

  afterAll(async () => {
    client?.close();
    await server?.close();
    await preprocessor?.close();
  });

  it('answers 500 KVG_ERR_INTERNAL with the fixed sentence, logs the cause under the request id, counts internal_error', async () => {
    const s = client.open();
    s.send(requestHeaders('/v1/chat/completions'));
    const body = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hello' }] });
    s.send({ request_body: { body: Buffer.from(body), end_of_stream: true } });
    const [answer] = await s.next(1);
    const text = (answer!.immediate_response as { body: Buffer }).body.toString();
    const requestId = /under request id (\S+)$/.exec(JSON.parse(text).error.message as string)?.[1];
    expect(requestId).toBeDefined();
    expect(answer).toEqual(
      immediate(
        500,
        'KVG_ERR_INTERNAL',
        `internal error; the gateway log has the details under request id ${requestId}`,
      ),
    );
    expect(text).not.toContain('not loaded');
    s.end();
    // The log has what the client was not told: the thread's own error, under the id the client was given.
    await until(() => lines.some((l) => l.msg === 'internal error'), 'the internal error logged');
    const line = lines.find((l) => l.msg === 'internal error')!;
    expect(line).toMatchObject({ level: 50, requestId, code: 'KVG_ERR_INTERNAL' });
    expect(JSON.stringify(line.err)).toContain(`model ${MODEL} is not loaded on this thread`);
    const scrape = await metrics.registry.metrics();
    const count = (outcome: string): number =>
      sampleSum(scrape, 'kvgate_picker_requests_total', { model: MODEL, outcome });
    expect([count('internal_error'), count('bad_request')]).toEqual([1, 0]);
    expect(server.picker.bookings()).toEqual({});
  });
});
