/**
 * The decode leg's stream of one disaggregated request as the client reads
 * it. Its first output is the proof that the decode engine has the KV, so a
 * consumer that leaves before it is not allowed to cut the leg: the stream is
 * read on until that output (then cancelled), which lets the prefill engine
 * release its KV. On the synchronous path the prefill's
 * `prompt_tokens_details` are laid over each chunk's usage.
 */
import { readChunkInfo, type EngineEvent } from '../../engines/index.js';
import { isKvgateError, type KvgateError } from '../../errors/index.js';
import { withPromptTokensDetails } from './handoff.js';
import type { DisaggOutcome, DisaggSseEvent } from './types.js';

/** What the decode stream reads of its request and tells it (the request's own state, read live). */
export interface DecodeProgress {
  /** The prefill's failure once recorded: reported instead of the decode cancellation it caused. */
  readonly prefillError: KvgateError | undefined;
  /** The decode leg has produced output (its engine has the KV). */
  readonly hasOutput: boolean;
  /** Told of the decode leg's first output. */
  output(): void;
  /** The decode leg is over for the client. */
  end(): void;
}

/** An event that carries generated output (or ends the stream): proof that the decode engine has the KV. */
function isOutput(ev: EngineEvent): boolean {
  if (ev.done) return true;
  if (ev.json === undefined) return false;
  const info = readChunkInfo(ev.json);
  return (info.tokenIds ?? 0) > 0 || info.outputChoices > 0 || info.finishReason !== undefined;
}

/** The decode stream as the client sees it: usage patched on the sync path, early exits deferred until the KV arrived. */
export async function* decodeEvents(
  events: AsyncIterable<EngineEvent>,
  details: Record<string, unknown> | undefined,
  progress: DecodeProgress,
): AsyncGenerator<DisaggSseEvent> {
  const it = events[Symbol.asyncIterator]();
  let completed = false;
  try {
    for (;;) {
      let next: IteratorResult<EngineEvent>;
      try {
        next = await it.next();
      } catch (err) {
        throw progress.prefillError !== undefined && isKvgateError(err, 'KVG_ERR_CLIENT_ABORTED')
          ? progress.prefillError
          : err;
      }
      if (next.done === true) {
        completed = true;
        return;
      }
      const ev = next.value;
      if (!progress.hasOutput && isOutput(ev)) progress.output();
      if (details !== undefined && !ev.done && ev.json !== undefined) {
        const patched = withPromptTokensDetails(ev.json, details);
        if (patched !== undefined) {
          yield { data: JSON.stringify(patched) };
          continue;
        }
      }
      yield ev;
    }
  } finally {
    if (completed) {
      progress.end();
    } else if (progress.hasOutput) {
      await it.return?.();
      progress.end();
    } else {
      void drainUntilOutput(it, progress);
    }
  }
}

/** The consumer left before the KV arrived: keep reading until it did (first output), then cancel. */
async function drainUntilOutput(it: AsyncIterator<EngineEvent>, progress: DecodeProgress): Promise<void> {
  try {
    for (;;) {
      const next = await it.next();
      if (next.done === true || isOutput(next.value)) break;
    }
  } catch {
    // The leg failed: its guard has released it.
  } finally {
    await it.return?.()?.catch(() => undefined);
    progress.end();
  }
}

/** `run()` already rejected (client gone): consume the decode answer just far enough to release both engines. */
export async function abandonDecode(out: DisaggOutcome, progress: DecodeProgress): Promise<void> {
  if (out.body.kind === 'json') return;
  const it = out.body.events[Symbol.asyncIterator]();
  try {
    for (;;) {
      const next = await it.next();
      if (next.done === true || progress.hasOutput) break;
    }
  } catch {
    // Cancelled at first output, or failed: either way the guards released the bookkeeping.
  } finally {
    await it.return?.()?.catch(() => undefined);
  }
}
