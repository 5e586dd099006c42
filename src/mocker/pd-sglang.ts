/**
 * SGLang-style prefill/decode rendezvous (bootstrap), simulated.
 * The router posts the same body, with bootstrap_host/port/room, to the
 * prefill engine P and the decode engine D at the same time; they pair up
 * through P's bootstrap server, in either arrival order:
 *
 *   D:  GET  http://bootstrap_host:bootstrap_port/bootstrap/info     -> {dp_size}
 *       prefill rank = room % dp_size
 *       POST /bootstrap/rendezvous {room, rank}   (long poll)
 *   P:  its HTTP request for (room, rank = room % dp_size) registers in the
 *       same table; once both sides are present, P prefills (1 token), then
 *       answers D's long poll with {prompt_tokens}; D waits the transfer delay
 *       and decodes.
 *
 * Either side alone waits at most `timeoutMs` for the other, then both fail
 * with KVG_ERR_REQUEST_TIMEOUT and the entry is gone: nothing leaks, and a
 * late partner starts a fresh wait (and times out in turn). Rooms travel as
 * decimal strings because they are 63-bit.
 *
 * This file owns the pairing table (`BootstrapRegistry`), P's bootstrap
 * server, D's rendezvous client and the engine's side of the protocol for
 * generation (`SglangHandoff`).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { httpOrigin, listen, parseJson, readBody, sendJson, type WorkerRole } from '../common/index.js';
import { KvgateError } from '../errors/index.js';
import { LOCAL_PLAN, type HandoffPlan, type HandoffProtocol } from './handoff.js';
import type { GenerateRequest } from './openai-protocol.js';
import type { FilledMockerOptions } from './options.js';

export interface PrefillOutcome {
  promptTokens: number;
}

interface Waiter<T> {
  resolve(v: T): void;
  reject(e: unknown): void;
}

interface Entry {
  /** P is here: resolved when D arrives. */
  prefill: Waiter<void> | undefined;
  /** D is here: resolved when P's prefill is done. */
  decode: Waiter<PrefillOutcome> | undefined;
  timer: NodeJS.Timeout | undefined;
}

function timeoutError(room: bigint, rank: number, side: Exclude<WorkerRole, 'aggregated'>, ms: number): KvgateError {
  const other = side === 'prefill' ? 'decode' : 'prefill';
  return new KvgateError(
    'KVG_ERR_REQUEST_TIMEOUT',
    `bootstrap room ${room} (prefill rank ${rank}): no ${other} request arrived within ${ms} ms`,
    { room: room.toString(), rank, side },
  );
}

/** The pairing table of one prefill worker. */
export class BootstrapRegistry {
  readonly timeoutMs: number;
  readonly #entries = new Map<string, Entry>();

  constructor(timeoutMs: number) {
    this.timeoutMs = timeoutMs;
  }

  get pending(): number {
    return this.#entries.size;
  }

  /** P side: resolves when D has arrived. @throws (rejects) KVG_ERR_REQUEST_TIMEOUT, KVG_ERR_DUPLICATE_REQUEST */
  prefillArrived(room: bigint, rank: number): Promise<void> {
    const key = `${room}:${rank}`;
    const e = this.#entry(key, room, rank);
    if (e.prefill !== undefined) return Promise.reject(this.#duplicate(room, rank, 'prefill'));
    return new Promise<void>((resolve, reject) => {
      e.prefill = { resolve, reject };
      if (e.decode !== undefined) this.#pair(e);
    });
  }

  /** D side: resolves when P's prefill is done. @throws (rejects) KVG_ERR_REQUEST_TIMEOUT, KVG_ERR_DUPLICATE_REQUEST, or P's failure */
  decodeArrived(room: bigint, rank: number): Promise<PrefillOutcome> {
    const key = `${room}:${rank}`;
    const e = this.#entry(key, room, rank);
    if (e.decode !== undefined) return Promise.reject(this.#duplicate(room, rank, 'decode'));
    return new Promise<PrefillOutcome>((resolve, reject) => {
      e.decode = { resolve, reject };
      if (e.prefill !== undefined) this.#pair(e);
    });
  }

  /** P finished prefilling: D may decode. */
  prefillDone(room: bigint, rank: number, outcome: PrefillOutcome): void {
    const key = `${room}:${rank}`;
    const e = this.#entries.get(key);
    this.#entries.delete(key);
    e?.decode?.resolve(outcome);
  }

  /** P failed after pairing (or before): D fails too. */
  prefillFailed(room: bigint, rank: number, err: unknown): void {
    const key = `${room}:${rank}`;
    const e = this.#entries.get(key);
    if (e === undefined) return;
    this.#entries.delete(key);
    if (e.timer !== undefined) clearTimeout(e.timer);
    e.decode?.reject(err);
  }

  /** D went away before pairing: forget its side. */
  decodeGone(room: bigint, rank: number): void {
    const key = `${room}:${rank}`;
    const e = this.#entries.get(key);
    if (e === undefined || e.prefill !== undefined) return;
    if (e.timer !== undefined) clearTimeout(e.timer);
    this.#entries.delete(key);
  }

  /** Fails every pending side (the engine is going away). */
  close(err: unknown): void {
    for (const e of this.#entries.values()) {
      if (e.timer !== undefined) clearTimeout(e.timer);
      e.prefill?.reject(err);
      e.decode?.reject(err);
    }
    this.#entries.clear();
  }

  #entry(key: string, room: bigint, rank: number): Entry {
    let e = this.#entries.get(key);
    if (e === undefined) {
      const created: Entry = { prefill: undefined, decode: undefined, timer: undefined };
      created.timer = setTimeout(() => {
        if (this.#entries.get(key) !== created) return;
        this.#entries.delete(key);
        created.prefill?.reject(timeoutError(room, rank, 'prefill', this.timeoutMs));
        created.decode?.reject(timeoutError(room, rank, 'decode', this.timeoutMs));
      }, this.timeoutMs);
      this.#entries.set(key, created);
      e = created;
    }
    return e;
  }

  #pair(e: Entry): void {
    if (e.timer !== undefined) clearTimeout(e.timer);
    e.timer = undefined;
    e.prefill!.resolve();
  }

  #duplicate(room: bigint, rank: number, side: string): KvgateError {
    return new KvgateError(
      'KVG_ERR_DUPLICATE_REQUEST',
      `bootstrap room ${room} (rank ${rank}) already has a ${side} request`,
      { room: room.toString(), rank },
    );
  }
}

export interface BootstrapServerInfo {
  dp_size: number;
  engine_id: string;
}

/** Bootstrap messages are a room and a rank; anything near this size is not one. */
const MAX_BOOTSTRAP_BODY_BYTES = 64 * 1024;

async function readJson(req: IncomingMessage): Promise<unknown> {
  return parseJson(await readBody(req, MAX_BOOTSTRAP_BODY_BYTES));
}

/** P's bootstrap HTTP server. */
export class BootstrapServer {
  readonly #server: Server;
  readonly #registry: BootstrapRegistry;
  readonly #info: () => BootstrapServerInfo;

  private constructor(server: Server, registry: BootstrapRegistry, info: () => BootstrapServerInfo) {
    this.#server = server;
    this.#registry = registry;
    this.#info = info;
  }

  static async listen(
    host: string,
    port: number,
    registry: BootstrapRegistry,
    info: () => BootstrapServerInfo,
  ): Promise<BootstrapServer> {
    const server = createServer();
    const bs = new BootstrapServer(server, registry, info);
    server.on('request', (req, res) => void bs.#handle(req, res));
    await listen(server, port, host);
    return bs;
  }

  get port(): number {
    return (this.#server.address() as AddressInfo).port;
  }

  async close(): Promise<void> {
    this.#server.closeAllConnections();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      if (req.method === 'GET' && req.url === '/bootstrap/info') return sendJson(res, 200, this.#info());
      if (req.method === 'POST' && req.url === '/bootstrap/rendezvous') {
        const body = (await readJson(req)) as { room?: unknown; rank?: unknown };
        if (typeof body.room !== 'string' || !/^\d+$/.test(body.room) || typeof body.rank !== 'number') {
          return sendJson(res, 400, { error: 'room (decimal string) and rank (integer) are required' });
        }
        const room = BigInt(body.room);
        const rank = body.rank;
        let settled = false;
        res.on('close', () => {
          if (!settled) this.#registry.decodeGone(room, rank);
        });
        try {
          const outcome = await this.#registry.decodeArrived(room, rank);
          settled = true;
          return sendJson(res, 200, { prompt_tokens: outcome.promptTokens });
        } catch (err) {
          settled = true;
          const e = err instanceof KvgateError ? err : undefined;
          return sendJson(res, e?.statusCode ?? 500, {
            error: (err as Error).message,
            code: e?.code ?? 'KVG_ERR_INTERNAL',
          });
        }
      }
      sendJson(res, 404, { error: 'not found' });
    } catch (err) {
      if (!res.headersSent) sendJson(res, 400, { error: (err as Error).message });
    }
  }
}

function url(host: string, port: number, path: string): string {
  return `${httpOrigin(host, port)}${path}`;
}

/**
 * D side: finds P's rank for the room and waits for P's prefill.
 * @throws KvgateError KVG_ERR_REQUEST_TIMEOUT when P never came; KVG_ERR_KV_TRANSFER_FAILED when P is unreachable or failed.
 */
async function rendezvousWithPrefill(
  host: string,
  port: number,
  room: bigint,
  signal: AbortSignal | undefined,
): Promise<{ rank: number; promptTokens: number }> {
  const fail = (reason: string): KvgateError =>
    new KvgateError('KVG_ERR_KV_TRANSFER_FAILED', `bootstrap with ${host}:${port} failed: ${reason}`, {
      room: room.toString(),
    });
  let info: BootstrapServerInfo;
  try {
    const r = await fetch(url(host, port, '/bootstrap/info'), { signal });
    info = (await r.json()) as BootstrapServerInfo;
  } catch (err) {
    throw fail(`cannot reach the bootstrap server (${(err as Error).message})`);
  }
  if (!Number.isInteger(info.dp_size) || info.dp_size <= 0) throw fail('bad bootstrap info');
  const rank = Number(room % BigInt(info.dp_size));
  let res: Response;
  try {
    res = await fetch(url(host, port, '/bootstrap/rendezvous'), {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ room: room.toString(), rank }),
      signal,
    });
  } catch (err) {
    throw fail(`rendezvous interrupted (${(err as Error).message})`);
  }
  const body = (await res.json().catch(() => ({}))) as { prompt_tokens?: unknown; error?: unknown; code?: unknown };
  if (res.ok && typeof body.prompt_tokens === 'number') return { rank, promptTokens: body.prompt_tokens };
  const message = typeof body.error === 'string' ? body.error : `HTTP ${res.status}`;
  if (body.code === 'KVG_ERR_REQUEST_TIMEOUT')
    throw new KvgateError('KVG_ERR_REQUEST_TIMEOUT', message, { room: room.toString(), rank });
  throw fail(message);
}

/**
 * SGLang's protocol on a prefill or decode engine (an aggregated SGLang
 * engine has none): every request must carry the bootstrap triple. P
 * registers the room and waits for D, then prefills one token on the room's
 * rank and tells D when done; D waits for P's prefill, then decodes with the
 * prompt's KV transferred.
 */
export class SglangHandoff implements HandoffProtocol {
  readonly #options: FilledMockerOptions;
  /** P's pairing table while the engine is up (undefined after a crash). */
  readonly #registry: () => BootstrapRegistry | undefined;

  constructor(options: FilledMockerOptions, registry: () => BootstrapRegistry | undefined) {
    this.#options = options;
    this.#registry = registry;
  }

  async prepare(p: GenerateRequest, promptTokens: number, signal: AbortSignal): Promise<HandoffPlan | undefined> {
    const o = this.#options;
    const b = p.bootstrap;
    if (b === undefined) {
      throw new KvgateError(
        'KVG_ERR_INVALID_REQUEST',
        `this is a ${o.mode} engine: bootstrap_host, bootstrap_port and bootstrap_room are required`,
        { param: 'bootstrap_room' },
      );
    }
    if (o.mode === 'prefill') return this.#prefill(p, b.room, signal);
    const { promptTokens: computed } = await rendezvousWithPrefill(b.host, b.port, b.room, signal);
    if (computed !== promptTokens) {
      throw new KvgateError(
        'KVG_ERR_KV_TRANSFER_FAILED',
        `the prefill engine computed ${computed} prompt tokens but this prompt has ${promptTokens}`,
        { param: 'bootstrap_room' },
      );
    }
    return { ...LOCAL_PLAN, remotePrefill: true };
  }

  responseParams(): unknown {
    return null;
  }

  async #prefill(p: GenerateRequest, room: bigint, signal: AbortSignal): Promise<HandoffPlan | undefined> {
    const dpSize = this.#options.dpSize;
    const rank = p.dpRank ?? Number(room % BigInt(dpSize));
    if (rank >= dpSize)
      throw new KvgateError(
        'KVG_ERR_INVALID_DP_RANK',
        `data-parallel rank ${rank} does not exist (dp_size ${dpSize})`,
        { param: 'data_parallel_rank' },
      );
    await this.#registry()!.prefillArrived(room, rank);
    if (signal.aborted) {
      this.#registry()?.prefillFailed(
        room,
        rank,
        new KvgateError('KVG_ERR_KV_TRANSFER_FAILED', 'the prefill request was cancelled', {}),
      );
      return undefined;
    }
    return {
      remotePrefill: false,
      holdBlocksMs: undefined,
      forcedRank: rank,
      maxTokens: 1,
      finished: (info) => this.#registry()?.prefillDone(room, rank, { promptTokens: info.promptTokens }),
      failed: (err) => this.#registry()?.prefillFailed(room, rank, err),
    };
  }
}
