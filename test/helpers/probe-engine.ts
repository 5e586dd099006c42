/**
 * What the tokenizer agreement probe's tests share: kvgate's side of the canary (the fallback tokenizer and its
 * ChatML template, as the gateway tokenizes for a model without a tokenizer file), an engine side that tokenizes
 * differently at one token, the BlockStored chain an engine publishes for a prompt, and the engine double's parts
 * (the chat answer it gives, the worker that names it).
 */
import type { ServerResponse } from 'node:http';
import type { WorkerInfo } from '../../src/discovery/index.js';
import { fallbackTokenizer } from '../../src/tokenizer/index.js';
import { sendJson } from './http-engine.js';
import type { TestEvent } from './zmq-publisher.js';

export type ChatMessages = readonly { role: string; content: string }[];

/** The block size every probe test's engine stores in. */
export const PROBE_BLOCK = 16;

const tok = fallbackTokenizer();

/** kvgate's token ids of a chat, as the gateway renders and tokenizes it for a model without a tokenizer file. */
export async function canaryTokenize(messages: ChatMessages): Promise<Uint32Array> {
  return Uint32Array.from(
    await tok.encode(tok.renderChat(messages, { addGenerationPrompt: true }), { addSpecialTokens: false }),
  );
}

/** An engine's tokenization that differs from kvgate's at token 40: block 2, offset 8, at `PROBE_BLOCK`. */
export async function shiftedTokenize(messages: ChatMessages): Promise<Uint32Array> {
  const ids = await canaryTokenize(messages);
  ids[40] = ids[40]! + 1;
  return ids;
}

/** How an engine reports a request's salt with its blocks: as vLLM, as SGLang, or not at all (an older vLLM). */
export type SaltReport = 'vllm' | 'sglang' | 'none';

/** Block hashes unique within a test process, so every chain is new to the engine double's publisher. */
let nextHash = 1n;

/**
 * One BlockStored event per full block of `ids`, chained from the root; with `salt`, reported on the first block
 * as `report` says (vLLM: block 0's `extra_keys`; SGLang: every event's `cache_salt`).
 */
export function storedChain(ids: ArrayLike<number>, salt?: string, report: SaltReport = 'none'): TestEvent[] {
  const out: TestEvent[] = [];
  let parent: bigint | null = null;
  for (let b = 0; b + PROBE_BLOCK <= ids.length; b += PROBE_BLOCK) {
    const h = nextHash++;
    const tokens = Array.from(ids).slice(b, b + PROBE_BLOCK);
    const ev: TestEvent = { type: 'stored', blockHashes: [h], parent, tokens, blockSize: PROBE_BLOCK };
    if (salt !== undefined && report === 'vllm') ev.extraKeys = [parent === null ? [salt] : null];
    if (salt !== undefined && report === 'sglang') ev.cacheSalt = salt;
    out.push(ev);
    parent = h;
  }
  return out;
}

/** The engine double's answer to a canary chat (what it says does not matter, only that it took the request). */
export function answerCanary(res: ServerResponse): void {
  sendJson(res, 200, {
    id: 'c',
    object: 'chat.completion',
    choices: [{ index: 0, message: { role: 'assistant', content: 'ok' } }],
  });
}

/** Worker 1 of model `m`, a vLLM engine at `url` publishing its KV events at `kvEvents`. */
export function probeWorker(url: string, kvEvents: string): WorkerInfo {
  return {
    id: 1,
    model: 'm',
    url,
    role: 'aggregated',
    dialect: 'vllm',
    dpStart: 0,
    dpSize: 1,
    kvEvents: { endpoint: kvEvents },
  };
}
