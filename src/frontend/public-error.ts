/**
 * What a client may learn about a failure behind the gateway. Engine and
 * transport failures carry, inside kvgate, the engine's URL, the socket error
 * and the engine's own error text (for the log); the client gets the stable
 * code, a fixed sentence per code and the worker id, nothing else. Failures of
 * the request itself (validation, limits, routing) are the client's business
 * and pass through unchanged; so is an engine's refusal of the request (a 4xx),
 * which is answered in kvgate's error object with the engine's message bounded
 * and without addresses (src/engines/refusal.ts): before the stream as an
 * answer, in a stream begun as its final error event (an error marked
 * `detail.redacted`).
 */
import type { ModelConfig } from '../config/index.js';
import { KvgateError, type KvgateErrorCode } from '../errors/index.js';

/** The fixed client-facing sentence of each failure behind the gateway; `{w}` is "worker N" (or "a worker"). */
const UPSTREAM_SENTENCES: Partial<Record<KvgateErrorCode, string>> = {
  KVG_ERR_ENGINE_NOT_REGISTERED: 'the engine of {w} is not available',
  KVG_ERR_ENGINE_UNREACHABLE: 'the engine of {w} could not be reached',
  KVG_ERR_ENGINE_DISCONNECTED: 'the engine of {w} dropped the connection before answering',
  KVG_ERR_ENGINE_HEADERS_TIMEOUT: 'the engine of {w} did not answer in time',
  KVG_ERR_ENGINE_BODY_TIMEOUT: 'the engine of {w} stalled mid-response',
  KVG_ERR_ENGINE_REJECTED: 'the engine of {w} refused the request',
  KVG_ERR_ENGINE_FAILED: 'the engine of {w} failed to answer',
  KVG_ERR_ENGINE_STREAM_BROKEN: 'the response of {w} broke mid-way',
  KVG_ERR_ENGINE_BAD_RESPONSE: 'the engine of {w} sent a malformed response',
  KVG_ERR_NO_DISAGGREGATED_PARAMS: 'the prefill engine of {w} returned no KV transfer parameters',
  KVG_ERR_PREFILL_FAILED: 'the prefill on {w} failed',
  KVG_ERR_KV_TRANSFER_FAILED: 'the KV transfer to {w} failed',
  KVG_ERR_KV_EVENT_REPLAY: 'the KV-event replay of {w} failed',
};

/** Whether errors of `code` come from behind the gateway (their internal message may hold URLs and upstream text). */
function isUpstream(code: KvgateErrorCode): boolean {
  return code in UPSTREAM_SENTENCES || code.startsWith('KVG_ERR_ENGINE_');
}

/** A client-facing copy of an upstream error: same code and HTTP status, a fixed message naming the worker. */
class PublicUpstreamError extends KvgateError {
  override readonly statusCode: number;

  constructor(original: KvgateError, workerId: number | undefined) {
    const w = workerId === undefined ? 'a worker' : `worker ${workerId}`;
    const sentence = (UPSTREAM_SENTENCES[original.code] ?? 'the engine of {w} failed').replace('{w}', w);
    super(original.code, `${sentence} (${original.code}); the gateway log has the details`, {
      param: null,
      ...(workerId !== undefined ? { workerId } : {}),
    });
    this.statusCode = original.statusCode;
  }
}

function urlKey(url: string): string {
  try {
    const u = new URL(url);
    return `${u.origin}${u.pathname.replace(/\/+$/, '')}`;
  } catch {
    return url;
  }
}

/** Turns internal errors into what clients see, resolving engine URLs to worker ids from the config. */
export class PublicErrors {
  readonly #idByUrl = new Map<string, number>();

  constructor(models: readonly ModelConfig[]) {
    for (const m of models) for (const w of m.workers) this.#idByUrl.set(urlKey(w.url), w.id);
  }

  /** The worker an error (or one of its causes) names: `detail.workerId`, or `detail.worker` as an engine URL. */
  workerOf(err: unknown): number | undefined {
    for (let e = err, hops = 0; e instanceof Error && hops < 8; e = e.cause, hops++) {
      const detail = e instanceof KvgateError ? e.detail : undefined;
      if (typeof detail?.workerId === 'number') return detail.workerId;
      if (typeof detail?.worker === 'string') {
        const id = this.#idByUrl.get(urlKey(detail.worker));
        if (id !== undefined) return id;
      }
    }
    return undefined;
  }

  /**
   * `err` as the client may see it; `worker` is the worker serving the request when the caller knows it.
   * Returns `err` itself unless it came from behind the gateway.
   */
  of(err: KvgateError, worker?: number): KvgateError {
    if (!isUpstream(err.code)) return err;
    // Already fit for the client: an engine's refusal in its stream, bounded and without addresses (refusal.ts).
    if (err.detail?.['redacted'] === true) return err;
    return new PublicUpstreamError(err, this.workerOf(err) ?? worker);
  }
}
