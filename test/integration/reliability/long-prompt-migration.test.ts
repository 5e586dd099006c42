/**
 * Migration at agent sizes, over real processes: a chat of more than 100k
 * prompt tokens whose engines stall mid-answer (the mocker's stall fault, the
 * gateway's stream idle timeout) resumes on another engine with the right
 * prompt ids. The gateway takes those ids from the first
 * chunk's `prompt_token_ids` as text, cut before the parse and read only when
 * a migration needs them (engines' prompt-ids.ts): the resumed answer equals
 * the uninterrupted one (the mocker's tokens are a pure function of the
 * context), a client that did not ask for ids sees none, and a client that
 * asked sees every prompt id, as the engine sent them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startServeCli, type CliProcess, type MockerLine } from '../../helpers/cli-process.js';
import { serveConfig, startMockerSuite, workerEntry, type MockerSuite } from '../../helpers/serve-suite.js';

const MODEL = 'mock-model';
const MAX_TOKENS = 24;
/** The first leg's engine stalls after this many tokens (the mocker's fault, read when a request starts). */
const STALL_AFTER = 8;
/** About 120k prompt tokens with the Qwen3 tokenizer (checked below against the usage). */
const PROMPT = Array.from({ length: 25_000 }, (_, i) => `w${i % 977} and`).join(' ');

/** Sets the stall fault of `e` (null: off). */
async function stallAfter(e: MockerLine, tokens: number | null): Promise<void> {
  const res = await fetch(`${e.url}/admin/faults`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ stall_after_tokens: tokens }),
  });
  expect(res.status).toBe(200);
}

interface Chunk {
  choices?: { delta?: { content?: string } }[];
  usage?: Record<string, number>;
  prompt_token_ids?: number[];
}

interface Streamed {
  readonly status: number;
  readonly text: string;
  readonly chunks: Chunk[];
  readonly raw: string;
}

describe('migration of a chat past 100k prompt tokens', () => {
  let suite: MockerSuite;
  let gateway: CliProcess;
  let url: string;

  beforeAll(async () => {
    // Three engines of one mocker process, fast (the stall fault, not slowness, cuts an answer), a long context.
    const args = ['--speedup', '50', '--tokenizer', 'demo', '--max-model-len', '200000'];
    suite = await startMockerSuite('long-migration', args, 3);
    const workers = suite.engines.map((e, i) => `  - ${workerEntry(i + 1, e)}`);
    const file = suite.write(
      'serve.yaml',
      serveConfig(MODEL, [
        'router_mode: round-robin',
        'max_prompt_tokens: 190000',
        'migration_limit: 2',
        'engine_timeouts: { stream_idle_timeout_ms: 1000 }',
        'workers:',
        ...workers,
      ]),
    );
    const served = await startServeCli(file);
    suite.procs.push(served.proc);
    gateway = served.proc;
    url = served.url;
  }, 60_000);

  afterAll(async () => {
    await suite?.stop();
  });

  /** A streamed chat of PROMPT; `onStall` runs once STALL_AFTER tokens reached the client. */
  async function streamChat(extra: Record<string, unknown> = {}, onStall?: () => Promise<void>): Promise<Streamed> {
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: PROMPT }],
        max_tokens: MAX_TOKENS,
        stream: true,
        stream_options: { include_usage: true },
        ...extra,
      }),
    });
    let raw = '';
    let stalled: Promise<void> | undefined;
    const decoder = new TextDecoder();
    for await (const bytes of res.body!) {
      raw += decoder.decode(bytes, { stream: true });
      if (
        onStall !== undefined &&
        stalled === undefined &&
        parse(raw.slice(0, raw.lastIndexOf('\n\n') + 1)).length >= STALL_AFTER
      )
        stalled = onStall();
    }
    await stalled;
    const chunks = parse(raw);
    const text = chunks.map((c) => c.choices?.[0]?.delta?.content ?? '').join('');
    return { status: res.status, text, chunks, raw };
  }

  /** The chunks with content or usage of whole events in `raw`. */
  function parse(raw: string): Chunk[] {
    return [...raw.matchAll(/^data: (\{.*)\n/gm)]
      .map((m) => JSON.parse(m[1]!) as Chunk)
      .filter((c) => c.choices?.[0]?.delta?.content !== undefined || c.usage !== undefined);
  }

  const usage = (s: Streamed): Record<string, number> => s.chunks.findLast((c) => c.usage !== undefined)!.usage!;
  const promptIds = (s: Streamed): number[] | undefined =>
    s.chunks.find((c) => c.prompt_token_ids !== undefined)?.prompt_token_ids;

  let reference: Streamed;
  const clearStalls = async (): Promise<void> => {
    await Promise.all(suite.engines.map((e) => stallAfter(e, null)));
  };

  it('reference: the client that asks for token ids gets every prompt id on the first chunk', async () => {
    reference = await streamChat({ return_token_ids: true });
    expect(reference.status, reference.raw).toBe(200);
    expect(usage(reference).prompt_tokens).toBeGreaterThan(100_000);
    expect(usage(reference).completion_tokens).toBe(MAX_TOKENS);
    expect(promptIds(reference)).toHaveLength(usage(reference).prompt_tokens!);
  }, 60_000);

  it('its engine stalls after 8 tokens: the answer goes on on another engine with the same text; the client sees no ids', async () => {
    await Promise.all(suite.engines.map((e) => stallAfter(e, STALL_AFTER)));
    // The first leg's engine stalls after 8 tokens; the others take the continuation unfaulted.
    const out = await streamChat({}, clearStalls);
    expect(out.status).toBe(200);
    expect(out.text).toBe(reference.text);
    expect(out.raw).not.toContain('token_ids');
    expect(out.raw.match(/^data: \[DONE\]$/gm)).toHaveLength(1);
    expect(usage(out).completion_tokens).toBe(MAX_TOKENS);
    expect(usage(out).prompt_tokens).toBe(usage(reference).prompt_tokens);
    await gateway.waitFor(/stream migrated to another worker and completed/, 'the migration log line');
  }, 60_000);

  it('a client that asked for the ids, migrated: the same text, and the first chunk carries the same prompt ids', async () => {
    await Promise.all(suite.engines.map((e) => stallAfter(e, STALL_AFTER)));
    const out = await streamChat({ return_token_ids: true }, clearStalls);
    expect(out.status).toBe(200);
    expect(out.text).toBe(reference.text);
    expect(promptIds(out)).toEqual(promptIds(reference));
    const metrics = await (await fetch(`${url}/metrics`)).text();
    const succeeded = metrics
      .split('\n')
      .find((l) => /^kvgate_router_migrations_total\{[^}]*outcome="succeeded"/.test(l));
    expect(Number(succeeded?.split(' ').pop())).toBe(2);
  }, 60_000);
});
