/**
 * A chat body parsed from where it stops repeating its conversation's last
 * one (preprocess/body-reuse.ts) is the body JSON.parse gives: seeded
 * conversations sent turn by turn, serialised in several ways (compact,
 * pretty-printed, keys around `messages`, a byte order mark), with every kind
 * of change between turns (messages appended, the last one edited or dropped,
 * an earlier one rewritten, the fields before the array changed), each turn
 * parsed with the previous turn's body kept, must equal a whole parse; bodies
 * that are not JSON are never parsed by reuse; a repeated `messages` is
 * parsed whole. The kept bodies share the conversation cache's byte budget.
 * Through a gateway, a conversation's turns reach the router as the same
 * requests whether its thread reuses the last body or parses each whole.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { jsonByteMembers, seededRng, type Rng } from '../../src/common/index.js';
import { serializeBody } from '../../src/engines/request-body.js';
import {
  bodyEntry,
  bodyKey,
  messagesReader,
  parseReusing,
  reusableMessages,
  type BodyEntry,
  type MessagesSpan,
} from '../../src/frontend/preprocess/body-reuse.js';
import { ConversationCache } from '../../src/frontend/preprocess/conversation-cache.js';
import { preprocessModelSpecs, type PreparedRequest } from '../../src/frontend/index.js';
import { FakeRouter } from './fake-router.js';
import { largeBodyConfig, post, startPoolGateway, type PoolGateway } from './server-harness.js';

const WORDS = [
  'tool',
  'call',
  'ünïcode',
  '日本語',
  'quote "x"',
  'back\\slash',
  '],"role":"user',
  'line\nbreak',
  'emoji 🙂',
];

function text(rng: Rng, n: number): string {
  return Array.from({ length: n }, () => WORDS[Math.floor(rng() * WORDS.length)]!).join(' ');
}

type Message = Record<string, unknown>;

function message(rng: Rng, i: number): Message {
  const r = rng();
  if (r < 0.15)
    return {
      role: 'assistant',
      content: '',
      tool_calls: [
        { id: `c${i}`, type: 'function', function: { name: 'grep', arguments: JSON.stringify({ q: text(rng, 3) }) } },
      ],
    };
  if (r < 0.25) return { role: 'tool', tool_call_id: `c${i}`, content: [{ type: 'text', text: text(rng, 40) }] };
  return { role: i % 2 === 0 ? 'user' : 'assistant', content: text(rng, 20 + Math.floor(rng() * 200)) };
}

/** Ways a client serialises a body: compact, pretty-printed, `messages` first or last, with a byte order mark. */
const SERIALISE: ((body: Record<string, unknown>) => string)[] = [
  (b) => JSON.stringify(b),
  (b) => JSON.stringify(b, null, 2),
  (b) => JSON.stringify({ messages: b.messages, ...b }),
  (b) => `\uFEFF${JSON.stringify(b)}`,
  (b) => JSON.stringify(b).replaceAll('},{', '} ,\n {'),
];

interface Turn {
  bytes: Buffer;
  span: MessagesSpan | undefined;
}

function scan(json: string): Turn {
  const bytes = Buffer.from(json, 'utf8');
  const reader = messagesReader(bytes, 'messages');
  jsonByteMembers(bytes, reader.read);
  return { bytes, span: reader.span() };
}

/** The body parsed by reuse of `kept`, or undefined when nothing is reused; and how many messages were. */
function reuseParse(kept: BodyEntry | undefined, t: Turn): { body?: Record<string, unknown>; reused: number } {
  if (kept === undefined || t.span === undefined) return { reused: 0 };
  const reused = reusableMessages(kept, t.bytes, t.span);
  return { body: reused === 0 ? undefined : parseReusing(t.bytes, 'messages', t.span, kept, reused), reused };
}

const wholeParse = (json: string): unknown => JSON.parse(json.replace(/^\uFEFF/, ''));

describe('a body parsed by reuse of the last turn', () => {
  it.each([1, 2, 3, 4, 5, 6])('equals a whole parse, turn by turn (seed %i)', (seed) => {
    const rng = seededRng(seed);
    const serialise = SERIALISE[seed % SERIALISE.length]!;
    const messages: Message[] = [{ role: 'system', content: text(rng, 300) }, message(rng, 1)];
    let kept: BodyEntry | undefined;
    let reusedTurns = 0;
    for (let turn = 0; turn < 30; turn++) {
      const change = rng();
      if (change < 0.55) messages.push(message(rng, messages.length), message(rng, messages.length + 1));
      else if (change < 0.7) messages[messages.length - 1] = message(rng, messages.length);
      else if (change < 0.8 && messages.length > 2) messages.pop();
      else if (change < 0.9) messages[1 + Math.floor(rng() * (messages.length - 1))] = message(rng, 7);
      const body = { model: change < 0.95 ? 'demo' : 'demo-2', messages, max_tokens: turn, stream: turn % 2 === 0 };
      const json = serialise(body);
      const t = scan(json);
      expect(t.span?.ends.length).toBe(messages.length);
      const { body: parsed, reused } = reuseParse(kept, t);
      if (reused > 0) {
        expect(parsed).toEqual(wholeParse(json));
        // The reused messages are the kept ones, not parsed again.
        expect((parsed!.messages as unknown[])[0]).toBe(kept!.parsed[0]);
        reusedTurns++;
      }
      const now = parsed ?? (wholeParse(json) as Record<string, unknown>);
      kept = bodyEntry(t.bytes, t.span!, now.messages as unknown[], false);
    }
    expect(reusedTurns).toBeGreaterThan(15);
  });

  it('keeps appended turns: all earlier messages are reused', () => {
    const rng = seededRng(9);
    const messages: Message[] = Array.from({ length: 40 }, (_, i) => message(rng, i));
    const first = scan(JSON.stringify({ model: 'demo', messages }));
    const kept = bodyEntry(first.bytes, first.span!, JSON.parse(first.bytes.toString()).messages, false);
    messages.push(message(rng, 40), message(rng, 41));
    const json = JSON.stringify({ model: 'demo', messages, max_tokens: 1 });
    const next = scan(json);
    expect(bodyKey(next.bytes, next.span!)).toBe(bodyKey(first.bytes, first.span!));
    expect(reuseParse(kept, next)).toEqual({ body: JSON.parse(json), reused: 40 });
  });

  it('never parses by reuse what is not JSON, and parses a repeated messages member whole', () => {
    const rng = seededRng(11);
    const messages: Message[] = Array.from({ length: 10 }, (_, i) => message(rng, i));
    const first = scan(JSON.stringify({ model: 'demo', messages }));
    const kept = bodyEntry(first.bytes, first.span!, messages, false);
    const good = JSON.stringify({ model: 'demo', messages: [...messages, message(rng, 10)] });
    const cut = good.lastIndexOf('{"role"');
    let tried = 0;
    for (const bad of [
      `${good.slice(0, cut)}]}`, // a trailing comma after the kept messages
      `${good.slice(0, cut)}{"role":"user","content":"x"]}`, // an element not closed
      `${good.slice(0, -2)}`, // the array not closed
      `${good.slice(0, -1)},"x":}`, // a member without a value after the array
    ]) {
      expect(() => JSON.parse(bad)).toThrow();
      // The member scan refuses some of them itself (then the body is parsed whole, for its error).
      let t: Turn;
      try {
        t = scan(bad);
      } catch {
        continue;
      }
      expect(reuseParse(kept, t).body).toBeUndefined();
      tried++;
    }
    expect(tried).toBeGreaterThan(0);
    const twice = `${good.slice(0, -1)},"messages":[{"role":"user","content":"other"}]}`;
    expect(scan(twice).span).toBeUndefined();
  });

  it("keys an agent's sessions apart by their first task, whatever the length of the system prompt they share", () => {
    const rng = seededRng(13);
    const system = { role: 'system', content: text(rng, 20_000) };
    const keys = new Set<string>();
    for (let session = 0; session < 5; session++) {
      const t = scan(
        JSON.stringify({ model: 'demo', messages: [system, { role: 'user', content: `task ${session}` }] }),
      );
      keys.add(bodyKey(t.bytes, t.span!)!);
    }
    expect(keys.size).toBe(5);
  });

  it('is kept in the conversation cache under its budget, least recently used out, counted as bytes only', () => {
    const cache = new ConversationCache(1_000_000);
    const rng = seededRng(3);
    const keys: string[] = [];
    for (let i = 0; i < 6; i++) {
      const messages = [{ role: 'system', content: `${i} ${text(rng, 8000)}` }];
      const t = scan(JSON.stringify({ messages }));
      const key = bodyKey(t.bytes, t.span!)!;
      keys.push(key);
      cache.keepBody(key, bodyEntry(t.bytes, t.span!, messages, false)!);
      const { bytes, entries } = cache.stats();
      expect(entries).toBe(0);
      expect(bytes).toBeGreaterThan(4 * t.bytes.length);
      expect(bytes).toBeLessThanOrEqual(1_000_000);
    }
    expect(cache.body(keys[0]!)).toBeUndefined();
    expect(cache.body(keys[5]!)?.messages.ends).toHaveLength(1);
  });
});

const config = largeBodyConfig();

describe("a conversation's turns through a preprocessing thread that reuses the last body", () => {
  const gateways: PoolGateway[] = [];
  beforeAll(async () => {
    // One thread keeps each conversation's last body; the other parses every body whole (its cache is off).
    for (const conversationCacheBytes of [128 << 20, 0]) {
      const specs = preprocessModelSpecs(config).map((s) => ({ ...s, conversationCacheBytes }));
      const router = new FakeRouter({ model: 'demo', workerIds: [1] });
      const pre = { threads: 1, inlineMaxBodyBytes: -1, inlineMaxChars: -1 };
      gateways.push(await startPoolGateway(config, router, pre, specs));
    }
  }, 60_000);
  afterAll(async () => {
    for (const g of gateways) await g.close();
  });

  const seen = (r: PreparedRequest): unknown => ({
    ids: [...r.tokenIds],
    seq: [...r.hashes.seq],
    hints: r.hints,
    engineBody: JSON.parse(serializeBody(r.body, { stream: true })),
  });

  it('reach the router as the same requests, and bad turns get the same answers', async () => {
    const rng = seededRng(5);
    const messages: Message[] = [{ role: 'system', content: text(rng, 10_000) }];
    let last = 0;
    for (let turn = 0; turn < 8; turn++) {
      messages.push(message(rng, 2 * turn), { role: 'user', content: text(rng, 300) });
      const bodies = [
        JSON.stringify({ model: 'demo', messages, max_tokens: 1 }),
        // The same turn with its last message cut short: refused alike, and the next turn still reuses.
        `${JSON.stringify({ model: 'demo', messages }).slice(0, -30)}`,
      ];
      for (const body of bodies) {
        const answers = [];
        for (const g of gateways) {
          const res = await post(`${g.url}/v1/chat/completions`, body);
          answers.push({ status: res.status, error: res.status === 200 ? undefined : res.json });
        }
        expect(answers[0]).toEqual(answers[1]);
      }
      const [a, b] = gateways.map((g) => g.router.routed.at(-1)!);
      expect(seen(a!)).toEqual(seen(b!));
      last = bodies[0]!.length;
      // The same turn routed only (its bytes stay on the reusing thread, kept for the next turn).
      const routes = [];
      for (const g of gateways) {
        const res = await post(`${g.url}/v1/route`, bodies[0]!);
        // A query's body is never forwarded: what routing reads of it is its ids, hashes, hints and light members.
        const q = g.router.queried.at(-1)!;
        routes.push({
          status: res.status,
          ids: res.json.token_ids,
          seq: [...q.hashes.seq],
          hints: q.hints,
          max: q.body.max_tokens,
        });
      }
      expect(routes[0]!.status).toBe(200);
      expect(routes[0]).toEqual(routes[1]);
    }
    // The reusing thread holds the last turn's body (four bytes a byte of it); the other holds nothing.
    const held = gateways.map((g) => g.pre.conversations.totals().get('demo')?.bytes ?? 0);
    expect(held[0]).toBeGreaterThan(4 * last);
    expect(held[1]).toBe(0);
    expect(gateways[0]!.router.routed.length).toBe(8);
  });

  it("reaches the router as the same requests through the agent APIs' conversation members", async () => {
    const rng = seededRng(6);
    const turns: Message[] = [];
    const system = text(rng, 10_000);
    for (let turn = 0; turn < 4; turn++) {
      turns.push({ role: 'user', content: text(rng, 300) }, { role: 'assistant', content: text(rng, 200) });
      const ask = [...turns, { role: 'user', content: text(rng, 50) }];
      for (const [path, body] of [
        ['/v1/messages', { model: 'demo', max_tokens: 1, system, messages: ask }],
        ['/v1/responses', { model: 'demo', instructions: system, input: ask }],
      ] as const) {
        const answers = [];
        for (const g of gateways) {
          const before = g.router.routed.length;
          const res = await post(`${g.url}${path}`, body);
          answers.push({
            status: res.status,
            seen: g.router.routed.length > before ? seen(g.router.routed.at(-1)!) : 0,
          });
        }
        expect(answers[0]!.status).toBe(200);
        expect(answers[0]).toEqual(answers[1]);
      }
    }
  });
});
