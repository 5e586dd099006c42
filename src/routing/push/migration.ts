/**
 * Request migration (Dynamo's `--migration-limit`): a client's stream that
 * loses its engine mid-way goes on, on the same connection, from another
 * worker. On a migratable failure (`isMigratable`: connection refused or
 * reset, a broken or timed-out stream, an engine 500/502/503/504; or a stream
 * that ended without a final chunk) the failed leg's booking is already
 * freed (its guard released it when its events threw), the failed worker is
 * excluded for the rest of the request, and the request is re-dispatched
 * as its continuation (continuation.ts): the prompt's ids and the tokens
 * generated so far, `max_tokens` reduced. The client sees one answer: no
 * token lost or repeated, one `[DONE]`, usage over the whole answer.
 *
 * Never migrated: a client abort, a non-migratable failure (an engine 4xx, an
 * error event), an answer that failed after its finish_reason (it ends with
 * the error: nothing is left to generate), a pinned request, a request whose body a
 * continuation could not honour once output reached the client (guided
 * decoding, tools, n > 1, logprobs, echo), an engine that did not send its
 * token ids, a context past `maxSeqLen`, and any request once `limit`
 * migrations were made. Those end as before: the events received, then the
 * error.
 *
 * An agent API's stream (Anthropic Messages, OpenAI Responses) is migrated only before its first event: a leg
 * that fails before any event (the engine died or produced nothing in time after its headers) goes to another
 * worker as it is, since the client has seen none of it; from its first event on, the leg's failure is the
 * client's (a continuation's chunks are an OpenAI stream's, not these APIs' event sequences).
 */
import { BatchedFlow, batchesOf, type Batched, type WorkerRole } from '../../common/index.js';
import { isMigratable, isPlainChunk, leanChunk, type EngineEvent } from '../../engines/index.js';
import { KvgateError } from '../../errors/index.js';
import type { RouterContext } from '../context.js';
import { continuationRequest, isAgentPath, midStreamBlocker, StreamProgress } from './continuation.js';
import type { LegRequest } from './types.js';

/** A model's migration knobs. */
export interface MigrationPolicy {
  /** Migrations per request (0: off). */
  readonly limit: number;
  /** No migration once the prompt and the generated tokens exceed this many tokens (undefined: no bound). */
  readonly maxSeqLen?: number | undefined;
}

/** Why a migratable failure was not migrated (the `reason` label of the skipped counter). */
export type MigrationSkip = 'max_seq_len' | 'not_migratable' | 'pinned' | 'no_token_ids';

/** What the migrating stream needs from its push router. */
export interface MigrationHooks {
  readonly policy: MigrationPolicy;
  /** The first leg's worker was pinned: the request goes nowhere else. */
  readonly pinned: boolean;
  /** Dispatches a leg (with the request's failed workers excluded); resolves with its guarded events. */
  redispatch(leg: LegRequest): Promise<{ readonly events: AsyncIterable<EngineEvent>; readonly workerId: number }>;
  /** The worker of the current leg failed with `err`: excluded from here on. */
  exclude(workerId: number, err: KvgateError): void;
  /** A continuation was dispatched. */
  started(): void;
  skipped(reason: MigrationSkip, err: KvgateError, detail: Record<string, unknown>): void;
  /** The request ended after `migrations` migrations (counted when > 0). */
  outcome(outcome: 'succeeded' | 'failed', migrations: number): void;
}

/** What `migrationHooks` needs: who migrates, where the next leg goes, and what else to do with a failed worker. */
export interface MigrationSetup {
  readonly ctx: Pick<RouterContext, 'logger' | 'metrics'>;
  readonly model: string;
  /** The pool whose legs migrate (the metrics' `worker_type`). */
  readonly role: WorkerRole;
  readonly requestId: string;
  readonly policy: MigrationPolicy;
  readonly pinned: boolean;
  /** The request's failed workers (the next legs never go there). */
  readonly exclude: Set<number>;
  readonly redispatch: MigrationHooks['redispatch'];
  readonly onExcluded?: ((workerId: number, err: KvgateError) => void) | undefined;
}

/** The hooks of one migrating request: exclusion, counting (kvgate_router_migrations*) and logging. */
export function migrationHooks(s: MigrationSetup): MigrationHooks {
  const m = s.ctx.metrics;
  const logger = s.ctx.logger;
  const labels = { model: s.model, worker_type: s.role };
  return {
    policy: s.policy,
    pinned: s.pinned,
    redispatch: s.redispatch,
    exclude: (workerId, err) => {
      s.exclude.add(workerId);
      s.onExcluded?.(workerId, err);
    },
    started: () => m?.migrations.labels({ ...labels, outcome: 'started' }).inc(),
    skipped: (reason, err, detail) => {
      m?.migrationsSkipped.labels({ ...labels, reason }).inc();
      logger.warn({ requestId: s.requestId, code: err.code, reason, ...detail }, 'stream failed and was not migrated');
    },
    outcome: (outcome, migrations) => {
      m?.migrations.labels({ ...labels, outcome }).inc();
      const line = { requestId: s.requestId, migrations, outcome };
      if (outcome === 'succeeded') logger.info(line, 'stream migrated to another worker and completed');
      else logger.warn(line, 'stream migration failed');
    },
  };
}

const encoder = new TextEncoder();

function event(json: unknown): EngineEvent {
  const data = JSON.stringify(json);
  return {
    raw: Buffer.from(encoder.encode(`data: ${data}\n\n`)),
    data,
    event: undefined,
    id: undefined,
    json,
    done: false,
  };
}

const DONE: EngineEvent = {
  raw: Buffer.from('data: [DONE]\n\n'),
  data: '[DONE]',
  event: undefined,
  id: undefined,
  json: undefined,
  done: true,
};

function cutError(): KvgateError {
  return new KvgateError('KVG_ERR_ENGINE_STREAM_BROKEN', "the engine's stream ended without a final chunk", {
    migratable: true,
  });
}

/**
 * The client's events of `req`, starting with the first leg's `events` on `workerId`, migrating on
 * migratable failures. Each leg's events are guarded by their push router (bookings freed on every exit).
 * Read in batches (common's `Batched`), a whole upstream read is followed at once.
 */
export function migratingEvents(
  req: LegRequest,
  first: AsyncIterable<EngineEvent>,
  workerId: number,
  hooks: MigrationHooks | (() => MigrationHooks),
): Batched<EngineEvent> {
  // Hooks given as a function are made only when a leg fails (most streams never need them).
  let made: MigrationHooks | undefined;
  const lazy = typeof hooks === 'function' ? (): MigrationHooks => (made ??= hooks()) : (): MigrationHooks => hooks;
  if (isAgentPath(req.path)) return new BatchedFlow(() => agentBatches(req, first, workerId, lazy));
  return new BatchedFlow(() => migratingBatches(req, first, workerId, lazy));
}

/** An agent API's stream: its legs until one yields an event, then that leg's events as they are (module comment). */
async function* agentBatches(
  req: LegRequest,
  first: AsyncIterable<EngineEvent>,
  workerId: number,
  hooks: () => MigrationHooks,
): AsyncGenerator<EngineEvent[]> {
  // Nothing is ever forwarded when a leg fails here: `nextLeg` sends the request itself again, no continuation.
  const progress = new StreamProgress(req.path, req.body);
  let events = first;
  let worker = workerId;
  let migrations = 0;
  for (;;) {
    const it = batchesOf(events)[Symbol.asyncIterator]();
    let next: IteratorResult<EngineEvent[]>;
    try {
      next = await it.next();
    } catch (failure) {
      ({ events, workerId: worker } = await nextLeg(req, progress, failure, worker, migrations, hooks()));
      migrations++;
      continue;
    }
    try {
      for (; next.done !== true; next = await it.next()) yield next.value;
    } catch (err) {
      if (migrations > 0) hooks().outcome('failed', migrations);
      throw err;
    } finally {
      // Left early (the client went): the leg's own cleanup runs, which stops its engine and frees its booking.
      if (next.done !== true) await it.return?.();
    }
    if (migrations > 0) hooks().outcome('succeeded', migrations);
    return;
  }
}

async function* migratingBatches(
  req: LegRequest,
  first: AsyncIterable<EngineEvent>,
  workerId: number,
  hooks: () => MigrationHooks,
): AsyncGenerator<EngineEvent[]> {
  const progress = new StreamProgress(req.path, req.body);
  progress.startLeg(false);
  let events = first;
  let worker = workerId;
  let migrations = 0;
  for (;;) {
    let failure: unknown;
    try {
      for await (const batch of batchesOf(events)) {
        const shown = clientEvents(batch, progress);
        if (shown.length > 0) yield shown;
      }
      if (progress.done) break;
      if (progress.finished) {
        // The answer is whole; its engine died before the sentinel.
        yield [DONE];
        break;
      }
      failure = cutError();
    } catch (err) {
      failure = err;
    }
    if (progress.done) break;
    const next = await nextLeg(req, progress, failure, worker, migrations, hooks());
    migrations++;
    events = next.events;
    worker = next.workerId;
  }
  if (migrations > 0) hooks().outcome('succeeded', migrations);
}

/** One batch of a leg's events as the client sees them, recorded in `progress`. */
function clientEvents(batch: EngineEvent[], progress: StreamProgress): EngineEvent[] {
  const out: EngineEvent[] = [];
  for (const ev of batch) {
    if (ev.done) {
      progress.done = true;
      out.push(ev);
      continue;
    }
    // A plain chunk records nothing its stream's earlier chunk of the same shape did not (stream-event.ts).
    if (isPlainChunk(ev) && progress.passesPlain()) {
      progress.forwarded = true;
      out.push(ev);
      continue;
    }
    // The prompt's ids are recorded as text, parsed only if a migration needs them (engines' prompt-ids.ts).
    const { json, cutPromptIds } = leanChunk(ev);
    if (typeof json !== 'object' || json === null || Array.isArray(json)) {
      out.push(ev);
      continue;
    }
    const shown = progress.clientChunk(json as Record<string, unknown>, cutPromptIds);
    if (shown === undefined) continue;
    progress.forwarded = true;
    // An unchanged lean chunk is the event itself when nothing was cut, or when the client asked for the ids.
    out.push(shown === json && (cutPromptIds === undefined || progress.keepsIds) ? ev : event(shown));
  }
  return out;
}

/** Decides on one failure: the next leg's events, or the failure rethrown. */
async function nextLeg(
  req: LegRequest,
  progress: StreamProgress,
  failure: unknown,
  workerId: number,
  migrations: number,
  hooks: MigrationHooks,
): Promise<{ events: AsyncIterable<EngineEvent>; workerId: number }> {
  const fail = (): never => {
    if (migrations > 0) hooks.outcome('failed', migrations);
    throw failure;
  };
  if (req.signal.aborted || !isMigratable(failure)) fail();
  // A finished answer that lost its end (its usage chunk cut short, or the connection reset before [DONE]) has
  // nothing left to generate: a continuation would add tokens after its finish_reason. The client is told.
  if (progress.finished) fail();
  const err = failure as KvgateError;
  if (hooks.pinned) {
    hooks.skipped('pinned', err, {});
    fail();
  }
  if (migrations >= hooks.policy.limit) fail();
  let leg: LegRequest = req;
  if (progress.forwarded) {
    const blocker = midStreamBlocker(req.body);
    if (blocker !== undefined) {
      hooks.skipped('not_migratable', err, { blocker });
      fail();
    }
    if (progress.promptIds === undefined || !progress.tokenIdsComplete) {
      hooks.skipped('no_token_ids', err, {});
      fail();
    }
    const seqLen = progress.promptIds!.length + progress.generated.length;
    const max = hooks.policy.maxSeqLen;
    if (max !== undefined && seqLen > max) {
      hooks.skipped('max_seq_len', err, { seqLen, maxSeqLen: max });
      fail();
    }
    const cont = continuationRequest(req.path, req.body, progress.promptIds!, progress.generated);
    if (cont === undefined) fail();
    leg = { ...req, path: cont!.path, body: cont!.body, isl: seqLen, onDispatched: undefined };
  }
  leg = { ...leg, migration: migrations + 1 };
  hooks.exclude(workerId, err);
  try {
    const next = await hooks.redispatch(leg);
    hooks.started();
    progress.startLeg(progress.forwarded);
    return next;
  } catch {
    // No worker could take it (none left, all refused): the client hears about the original failure.
    hooks.outcome('failed', migrations + 1);
    throw failure;
  }
}
