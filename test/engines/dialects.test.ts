import { afterEach, describe, expect, it } from 'vitest';
import {
  answersInOneToken,
  DP_RANK_HEADER,
  EngineClient,
  VLLM_PREFILL_KV_TRANSFER_PARAMS,
  applyFields,
  bootstrapFields,
  dpRankLegFields,
  mergeLegFields,
  readVllmPrefillResult,
  serializeBody,
  sglangDecodeLegFields,
  sglangPrefillLegFields,
  vllmDecodeLegFields,
  vllmPrefillLegFields,
} from '../../src/engines/index.js';
import { KvgateError, isKvgateError } from '../../src/errors/index.js';
import { sendJson, sseEvent, sseHead, startHttpEngine, type HttpEngine } from '../helpers/http-engine.js';

const chatBody = {
  model: 'qwen',
  messages: [{ role: 'user', content: 'hello' }],
  max_completion_tokens: 200,
  min_tokens: 5,
  stream: true,
  stream_options: { include_usage: true },
  temperature: 0,
};

function thrown(fn: () => unknown): KvgateError {
  try {
    fn();
  } catch (err) {
    if (err instanceof KvgateError) return err;
    throw err;
  }
  throw new Error('expected a throw');
}

describe('vLLM P/D dialect (wire formats 3.2)', () => {
  it('builds the prefill leg exactly: one token, no stream, do_remote_decode, request id header', () => {
    const leg = vllmPrefillLegFields(chatBody, { requestId: 'req-42' });
    expect(leg.headers).toEqual({ 'x-request-id': 'req-42' });
    expect(applyFields(chatBody, leg.fields)).toEqual({
      model: 'qwen',
      messages: [{ role: 'user', content: 'hello' }],
      max_completion_tokens: 1,
      max_tokens: 1,
      stream: false,
      temperature: 0,
      kv_transfer_params: {
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        remote_host: null,
        remote_port: null,
      },
    });
    // The serialised body has the exact field set, with the stripped fields gone.
    const wire = JSON.parse(serializeBody(chatBody, leg.fields)) as Record<string, unknown>;
    expect(wire).not.toHaveProperty('stream_options');
    expect(wire).not.toHaveProperty('min_tokens');
    expect(wire['kv_transfer_params']).toEqual(VLLM_PREFILL_KV_TRANSFER_PARAMS);
  });

  it('adds max_completion_tokens only when the client used it', () => {
    const leg = vllmPrefillLegFields({ prompt: 'p', max_tokens: 50 }, { requestId: 'r' });
    expect(leg.fields).toEqual({ stream: false, max_tokens: 1, kv_transfer_params: VLLM_PREFILL_KV_TRANSFER_PARAMS });
    expect(leg.fields['kv_transfer_params']).not.toBe(VLLM_PREFILL_KV_TRANSFER_PARAMS); // a fresh object per request
  });

  it('passes the prefill ticket to decode verbatim and leaves the client body alone', () => {
    const ticket = {
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_engine_id: 'eng-7',
      remote_block_ids: [[1, 2, 3]],
      remote_request_id: 'req-42',
      remote_host: '10.0.0.5',
      remote_port: 5600,
      tp_size: 2,
      some_future_field: { nested: ['kept'] },
    };
    const prefillResponse = {
      id: 'cmpl-1',
      choices: [{ index: 0, text: 'x', finish_reason: 'length' }],
      usage: { prompt_tokens: 100, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 64 } },
      kv_transfer_params: ticket,
    };
    const result = readVllmPrefillResult(prefillResponse);
    expect(result.kvTransferParams).toBe(ticket);
    expect(result.promptTokensDetails).toEqual({ cached_tokens: 64 });
    const leg = vllmDecodeLegFields({ requestId: 'req-42', kvTransferParams: result.kvTransferParams });
    expect(leg.headers).toEqual({ 'x-request-id': 'req-42' });
    expect(applyFields(chatBody, leg.fields)).toEqual({ ...chatBody, kv_transfer_params: ticket });
  });

  it('a prefill response without kv_transfer_params is KVG_ERR_NO_DISAGGREGATED_PARAMS', () => {
    for (const bad of [
      { choices: [{ finish_reason: 'stop' }] },
      { kv_transfer_params: null },
      { kv_transfer_params: [1] },
      'text',
      null,
    ]) {
      const err = thrown(() => readVllmPrefillResult(bad, { worker: 'http://p:1' }));
      expect(isKvgateError(err, 'KVG_ERR_NO_DISAGGREGATED_PARAMS')).toBe(true);
      expect(err.retryable).toBe(false);
    }
    expect(thrown(() => readVllmPrefillResult({ choices: [{ finish_reason: 'stop' }] })).detail).toMatchObject({
      finishReason: 'stop',
      present: false,
    });
  });

  it('rejects an empty request id', () => {
    expect(
      isKvgateError(
        thrown(() => vllmPrefillLegFields({}, { requestId: '' })),
        'KVG_ERR_INVALID_ARGUMENT',
      ),
    ).toBe(true);
  });
});

describe('SGLang P/D dialect (wire formats 3.1)', () => {
  const bootstrap = { host: '10.0.0.9', port: 8998, room: 9223372036854775807n };

  it('gives both legs the same bootstrap triple; prefill is one non-streaming token, decode keeps the client limits', () => {
    const prefill = sglangPrefillLegFields(chatBody, { bootstrap });
    const decode = sglangDecodeLegFields({ bootstrap });
    const triple = { bootstrap_host: '10.0.0.9', bootstrap_port: 8998, bootstrap_room: 9223372036854775807n };
    expect(prefill.fields).toMatchObject(triple);
    expect(decode.fields).toEqual(triple);
    expect(applyFields(chatBody, prefill.fields)).toEqual({
      model: 'qwen',
      messages: [{ role: 'user', content: 'hello' }],
      max_completion_tokens: 1,
      max_tokens: 1,
      stream: false,
      temperature: 0,
      ...triple,
    });
    expect(applyFields(chatBody, decode.fields)).toEqual({ ...chatBody, ...triple });
  });

  it('writes the 63-bit room as an exact JSON integer', () => {
    const wire = serializeBody({ prompt: 'p' }, sglangDecodeLegFields({ bootstrap }).fields);
    expect(wire).toBe(
      '{"prompt":"p","bootstrap_host":"10.0.0.9","bootstrap_port":8998,"bootstrap_room":9223372036854775807}',
    );
    expect(serializeBody({}, { bootstrap_room: 12n })).toBe('{"bootstrap_room":12}');
    expect(serializeBody({ bootstrap_room: 1 }, { bootstrap_room: 5n })).toBe('{"bootstrap_room":5}');
  });

  it('carries the prefill dp rank to decode when known', () => {
    expect(sglangDecodeLegFields({ bootstrap: { ...bootstrap, room: 7 }, prefillDpRank: 3 }).fields).toEqual({
      bootstrap_host: '10.0.0.9',
      bootstrap_port: 8998,
      bootstrap_room: 7n,
      disagg_prefill_dp_rank: 3,
    });
  });

  it('validates host, port and room', () => {
    const bad = [
      { ...bootstrap, host: '' },
      { ...bootstrap, port: 0 },
      { ...bootstrap, port: 65536 },
      { ...bootstrap, room: -1n },
      { ...bootstrap, room: 1n << 63n },
      { ...bootstrap, room: 1.5 },
      { ...bootstrap, room: 2 ** 60 }, // a number past 2^53 has already lost precision
    ];
    for (const b of bad)
      expect(
        isKvgateError(
          thrown(() => bootstrapFields(b)),
          'KVG_ERR_INVALID_ARGUMENT',
        ),
      ).toBe(true);
    expect(bootstrapFields({ ...bootstrap, room: 0 })['bootstrap_room']).toBe(0n);
  });
});

describe('data-parallel rank', () => {
  it('vLLM reads the header; SGLang gets the header and routed_dp_rank', () => {
    expect(dpRankLegFields('vllm', 2)).toEqual({ fields: {}, headers: { [DP_RANK_HEADER]: '2' } });
    expect(dpRankLegFields('sglang', 0)).toEqual({
      fields: { routed_dp_rank: 0 },
      headers: { 'x-data-parallel-rank': '0' },
    });
    expect(
      isKvgateError(
        thrown(() => dpRankLegFields('vllm', -1)),
        'KVG_ERR_INVALID_ARGUMENT',
      ),
    ).toBe(true);
    expect(
      isKvgateError(
        thrown(() => dpRankLegFields('sglang', 1.5)),
        'KVG_ERR_INVALID_ARGUMENT',
      ),
    ).toBe(true);
  });

  it('merges with a P/D leg, later legs winning', () => {
    const merged = mergeLegFields(
      dpRankLegFields('sglang', 1),
      sglangDecodeLegFields({ bootstrap: { host: 'h', port: 1, room: 2 } }),
      { fields: { routed_dp_rank: 3 }, headers: {} },
    );
    expect(merged.fields).toEqual({ routed_dp_rank: 3, bootstrap_host: 'h', bootstrap_port: 1, bootstrap_room: 2n });
    expect(merged.headers).toEqual({ 'x-data-parallel-rank': '1' });
  });
});

describe('one-token answers (answersInOneToken)', () => {
  it('max_completion_tokens when it is a number, else max_tokens, at most 1', () => {
    expect(answersInOneToken({ max_tokens: 1 })).toBe(true);
    expect(answersInOneToken({ max_tokens: 2 })).toBe(false);
    expect(answersInOneToken({})).toBe(false);
    expect(answersInOneToken({ max_tokens: 64, max_completion_tokens: 1 })).toBe(true);
    expect(answersInOneToken({ max_tokens: 1, max_completion_tokens: 64 })).toBe(false);
    expect(answersInOneToken({ max_tokens: 1, max_completion_tokens: null })).toBe(true);
    expect(answersInOneToken({ max_tokens: '1' })).toBe(false);
  });
});

describe('serializeBody', () => {
  it('serialises the body alone unchanged, and reports unserialisable bodies as KVG_ERR_INVALID_ARGUMENT', () => {
    const body = { a: 1, b: [true, null], c: { d: 'é' } };
    expect(serializeBody(body)).toBe(JSON.stringify(body));
    const cyclic: Record<string, unknown> = {};
    cyclic['self'] = cyclic;
    expect(
      isKvgateError(
        thrown(() => serializeBody(cyclic)),
        'KVG_ERR_INVALID_ARGUMENT',
      ),
    ).toBe(true);
    expect(
      isKvgateError(
        thrown(() => serializeBody({}, { nested: { room: 1n } })),
        'KVG_ERR_INVALID_ARGUMENT',
      ),
    ).toBe(true);
  });
});

describe('P/D legs over the wire', () => {
  const engines: HttpEngine[] = [];
  let client: EngineClient | undefined;
  afterEach(async () => {
    await client?.close({ force: true });
    while (engines.length > 0) await engines.pop()!.close();
  });

  it('vLLM: prefill returns the ticket, decode receives it verbatim and streams', async () => {
    const ticket = {
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_engine_id: 'p0',
      remote_block_ids: [[4, 5]],
      remote_host: '127.0.0.1',
      remote_port: 5600,
    };
    const prefill = await startHttpEngine((_req, res) =>
      sendJson(res, 200, {
        choices: [{ index: 0, text: 'a', finish_reason: 'length' }],
        usage: { prompt_tokens: 9, completion_tokens: 1 },
        kv_transfer_params: ticket,
      }),
    );
    const decode = await startHttpEngine((_req, res) => {
      sseHead(res);
      res.write(sseEvent({ choices: [{ index: 0, text: 'decoded' }] }));
      res.end(sseEvent('[DONE]'));
    });
    engines.push(prefill, decode);
    client = new EngineClient();
    client.addWorker(prefill.url);
    client.addWorker(decode.url);
    const body = { model: 'm', prompt: 'hello', max_tokens: 64, stream: true, stream_options: { include_usage: true } };
    const p = vllmPrefillLegFields(body, { requestId: 'rid-1' });
    const pre = await client.dispatch(prefill.url, '/v1/completions', body, {
      stream: false,
      extraFields: p.fields,
      headers: p.headers,
    });
    const { kvTransferParams } = readVllmPrefillResult(pre.json, { worker: prefill.url });
    const d = vllmDecodeLegFields({ requestId: 'rid-1', kvTransferParams });
    const stream = await client.dispatch(decode.url, '/v1/completions', body, {
      stream: true,
      extraFields: d.fields,
      headers: d.headers,
    });
    const texts: unknown[] = [];
    for await (const ev of stream) if (!ev.done) texts.push(ev.json);
    expect(texts).toEqual([{ choices: [{ index: 0, text: 'decoded' }] }]);
    expect(prefill.requests[0]!.json).toMatchObject({
      max_tokens: 1,
      stream: false,
      kv_transfer_params: VLLM_PREFILL_KV_TRANSFER_PARAMS,
    });
    expect(prefill.requests[0]!.json).not.toHaveProperty('stream_options');
    expect(decode.requests[0]!.json).toEqual({ ...body, kv_transfer_params: ticket });
    expect(prefill.requests[0]!.headers['x-request-id']).toBe('rid-1');
    expect(decode.requests[0]!.headers['x-request-id']).toBe('rid-1');
  });

  it('SGLang: both legs carry the identical triple, room exact on the wire', async () => {
    const prefill = await startHttpEngine((_req, res) => sendJson(res, 200, { choices: [{ index: 0, text: '' }] }));
    const decode = await startHttpEngine((_req, res) => sendJson(res, 200, { choices: [{ index: 0, text: 'out' }] }));
    engines.push(prefill, decode);
    client = new EngineClient();
    client.addWorker(prefill.url);
    client.addWorker(decode.url);
    const bootstrap = { host: '127.0.0.1', port: 8998, room: 4611686018427387951n };
    const body = { model: 'm', prompt: 'hello', max_tokens: 64 };
    const p = mergeLegFields(sglangPrefillLegFields(body, { bootstrap }), dpRankLegFields('sglang', 1));
    const d = sglangDecodeLegFields({ bootstrap, prefillDpRank: 1 });
    await Promise.all([
      client.dispatch(prefill.url, '/v1/completions', body, { extraFields: p.fields, headers: p.headers }),
      client.dispatch(decode.url, '/v1/completions', body, { extraFields: d.fields }),
    ]);
    const room = /"bootstrap_room":(\d+)/;
    expect(prefill.requests[0]!.rawBody.match(room)?.[1]).toBe('4611686018427387951');
    expect(decode.requests[0]!.rawBody.match(room)?.[1]).toBe('4611686018427387951');
    expect(prefill.requests[0]!.json).toMatchObject({
      max_tokens: 1,
      stream: false,
      bootstrap_host: '127.0.0.1',
      bootstrap_port: 8998,
      routed_dp_rank: 1,
    });
    expect(prefill.requests[0]!.headers['x-data-parallel-rank']).toBe('1');
    expect(decode.requests[0]!.json).toMatchObject({
      max_tokens: 64,
      bootstrap_host: '127.0.0.1',
      bootstrap_port: 8998,
      disagg_prefill_dp_rank: 1,
    });
  });
});
