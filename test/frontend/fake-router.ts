/**
 * An in-test ModelRouterPort: routes by longest prefix of sequence hashes seen
 * before (else round-robin), answers like an OpenAI engine (JSON or SSE), and
 * records what it was given. Streams can be held open with `hold()` to test
 * disconnects, timeouts, concurrency limits and draining.
 */
import type { CancelSignal, WorkerRank } from '../../src/common/index.js';
import { KvgateError } from '../../src/errors/index.js';
import type {
  ModelRouterPort,
  PreparedRequest,
  QueryResult,
  RoutedResponse,
  SseEvent,
} from '../../src/frontend/index.js';

export interface FakeRouterOptions {
  model: string;
  blockSize?: number;
  workerIds?: number[];
  direct?: boolean;
}

export class FakeRouter implements ModelRouterPort {
  readonly model: string;
  readonly blockSize: number;
  readonly workerIds: number[];
  readonly direct: boolean;
  servable = true;
  /** What adapters() answers. */
  servedAdapters: string[] = [];
  /** Every request route() or query() received. */
  readonly routed: PreparedRequest[] = [];
  readonly queried: PreparedRequest[] = [];
  /** Requests whose stream ended by return() (client gone) or whose signal fired. */
  readonly released: { requestId: string; how: 'end' | 'return' | 'abort' | 'error' }[] = [];
  /** Words each streamed answer has. */
  streamWords = ['Hello', ' from', ' the', ' fake', ' engine'];
  /** Fail streams after this many events (undefined: never). */
  failAfter: number | undefined;
  /** When set, every stream is these events as given (the words, usage and [DONE] are not added). */
  rawEvents: SseEvent[] | undefined;
  /** Events of `rawEvents` the gateway has taken so far (all streams). */
  rawYielded = 0;
  #owner = new Map<bigint, number>();
  #rr = 0;
  #gate: Promise<void> | undefined;
  #openGate: (() => void) | undefined;
  closed = false;

  constructor(opts: FakeRouterOptions) {
    this.model = opts.model;
    this.blockSize = opts.blockSize ?? 16;
    this.workerIds = opts.workerIds ?? [1, 2, 3];
    this.direct = opts.direct ?? false;
  }

  canServe(): boolean {
    return this.servable;
  }

  adapters(): string[] {
    return this.servedAdapters;
  }

  unavailable(): KvgateError | undefined {
    return this.servable
      ? undefined
      : new KvgateError('KVG_ERR_MODEL_UNAVAILABLE', `model ${this.model} has no worker available right now`);
  }

  /** Holds every stream after its first event (and every JSON answer) until `release()`. */
  hold(): void {
    this.#gate = new Promise((resolve) => {
      this.#openGate = resolve;
    });
  }

  release(): void {
    this.#openGate?.();
    this.#gate = undefined;
  }

  #choose(req: PreparedRequest): { worker: WorkerRank; overlap: number } {
    const pin = req.hints.decodeWorkerId ?? req.hints.backendInstanceId;
    if (this.direct && pin === undefined)
      throw new KvgateError('KVG_ERR_MISSING_WORKER_ID', 'router mode is direct: name the worker');
    if (pin !== undefined) {
      if (!this.workerIds.includes(pin))
        throw new KvgateError('KVG_ERR_UNKNOWN_WORKER', `worker ${pin} is not a worker of this model`, {
          workerId: pin,
        });
      return { worker: { workerId: pin, dpRank: req.hints.dpRank ?? 0 }, overlap: 0 };
    }
    let best: number | undefined;
    let depth = 0;
    for (const h of req.hashes.seq) {
      const w = this.#owner.get(h);
      if (w === undefined || (best !== undefined && w !== best)) break;
      best = w;
      depth++;
    }
    const id = best ?? this.workerIds[this.#rr++ % this.workerIds.length]!;
    return { worker: { workerId: id, dpRank: 0 }, overlap: depth };
  }

  async query(req: PreparedRequest): Promise<QueryResult> {
    this.queried.push(req);
    const { worker, overlap } = this.#choose(req);
    return { worker, overlapBlocks: overlap };
  }

  async route(req: PreparedRequest): Promise<RoutedResponse> {
    this.routed.push(req);
    const { worker } = this.#choose(req);
    for (const h of req.hashes.seq) if (!this.#owner.has(h)) this.#owner.set(h, worker.workerId);
    const id = `cmpl-${this.routed.length}`;
    const chat = req.endpoint === 'chat';
    const usage = {
      prompt_tokens: req.tokenIds.length,
      completion_tokens: this.streamWords.length,
      total_tokens: req.tokenIds.length + this.streamWords.length,
    };
    if (!req.stream) {
      if (this.#gate !== undefined) await this.#waitGate(req.signal);
      const text = this.streamWords.join('');
      const body = chat
        ? {
            id,
            object: 'chat.completion',
            created: 1,
            model: this.model,
            choices: [{ index: 0, message: { role: 'assistant', content: text }, finish_reason: 'stop' }],
            usage,
          }
        : {
            id,
            object: 'text_completion',
            created: 1,
            model: this.model,
            choices: [{ index: 0, text, finish_reason: 'stop' }],
            usage,
          };
      this.released.push({ requestId: req.requestId, how: 'end' });
      return { worker, status: 200, body: { kind: 'json', bytes: JSON.stringify(body) } };
    }
    return { worker, status: 200, body: { kind: 'sse', events: this.#events(req, id, usage) } };
  }

  #waitGate(signal: CancelSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      const onAbort = (): void => reject(signal.reason as Error);
      if (signal.aborted) return onAbort();
      signal.addEventListener('abort', onAbort, { once: true });
      void this.#gate!.then(() => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      });
    });
  }

  async *#events(req: PreparedRequest, id: string, usage: Record<string, number>): AsyncGenerator<SseEvent> {
    const chat = req.endpoint === 'chat';
    const enc = new TextEncoder();
    let how: 'end' | 'return' | 'abort' | 'error' = 'return';
    try {
      if (this.rawEvents !== undefined) {
        for (const ev of this.rawEvents) {
          this.rawYielded++;
          yield ev;
        }
        how = 'end';
        return;
      }
      let n = 0;
      for (const word of this.streamWords) {
        if (this.failAfter !== undefined && n === this.failAfter) {
          how = 'error';
          throw new KvgateError('KVG_ERR_ENGINE_STREAM_BROKEN', 'the engine connection broke mid-stream');
        }
        const chunk = chat
          ? {
              id,
              object: 'chat.completion.chunk',
              created: 1,
              model: this.model,
              choices: [{ index: 0, delta: { content: word }, finish_reason: null }],
            }
          : {
              id,
              object: 'text_completion',
              created: 1,
              model: this.model,
              choices: [{ index: 0, text: word, finish_reason: null }],
            };
        // Alternate the two event forms the port allows: raw block bytes, and data only.
        yield n % 2 === 0
          ? { raw: enc.encode(`data: ${JSON.stringify(chunk)}\n\n`), data: JSON.stringify(chunk) }
          : { data: JSON.stringify(chunk) };
        n++;
        if (n === 1 && this.#gate !== undefined) {
          try {
            await this.#waitGate(req.signal);
          } catch (err) {
            how = 'abort';
            throw err;
          }
        }
      }
      const last = chat
        ? {
            id,
            object: 'chat.completion.chunk',
            created: 1,
            model: this.model,
            choices: [{ index: 0, delta: {}, finish_reason: 'stop' }],
            usage,
          }
        : {
            id,
            object: 'text_completion',
            created: 1,
            model: this.model,
            choices: [{ index: 0, text: '', finish_reason: 'stop' }],
            usage,
          };
      yield { data: JSON.stringify(last) };
      yield { data: '[DONE]' };
      how = 'end';
    } finally {
      this.released.push({ requestId: req.requestId, how });
    }
  }

  async close(): Promise<void> {
    this.closed = true;
  }
}
