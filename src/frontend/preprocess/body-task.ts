/**
 * A large request body, handled on a preprocessing thread from its bytes to
 * its routing inputs (protocol.ts `BodyTask`): UTF-8 check, JSON parse and
 * schema (request-parse.ts, as the main thread does for a small body), model
 * and hints against the snapshot of the served models sent along, the prompt
 * task, then rendering, tokenizing and hashing. What goes back is bounded by
 * what routing reads, not by the body: where the client body's members lie
 * in its bytes, the fields the engine's body has instead, the light members'
 * values and the heavy ones' outlines (common's json-lazy.ts), the hints, and
 * the prompt's ids and hashes. The body's text stays here: the main thread
 * writes the engine's body as slices of the client's bytes, which it keeps
 * (moved back to it when they were moved here).
 */
import { jsonByteMembers, outlineJsonObject, type JsonMember } from '../../common/index.js';
import { jsonIdArray } from '../../wasm/index.js';
import { bodyText } from '../body.js';
import {
  checkRequestBody,
  parseRequestBody,
  routeRequestBody,
  type ParsedBody,
  type ServedModel,
} from '../request-parse.js';
import {
  bodyEntry,
  bodyKey,
  conversationMember,
  messagesReader,
  parseReusing,
  reusableMessages,
  REUSE_MIN_BYTES,
  type MessagesSpan,
} from './body-reuse.js';
import type { ModelPreprocessor } from './model-preprocessor.js';
import {
  ownBuffer,
  workerError,
  type BodyOutcome,
  type BodyTask,
  type ModelView,
  type PreprocessResult,
  type WorkerError,
} from './protocol.js';

/** A completion prompt of token ids whose JSON is this many bytes or more is read from the bytes (wasm's jsonIdArray). */
const ID_PROMPT_BYTES = 16 * 1024;

/** A body's members, and a completion prompt of token ids read from the bytes on the way (`ID_PROMPT_BYTES`). */
interface Scanned {
  /** Each key once, byte offsets; undefined when the bytes are not a JSON object (the parse says how). */
  readonly members: JsonMember[] | undefined;
  readonly prompt?: { readonly ids: Uint32Array; readonly start: number; readonly end: number } | undefined;
  /** Where a large body's conversation array lies (body-reuse.ts), for a parse that reuses the last turn's. */
  readonly messages?: (MessagesSpan & { readonly member: string }) | undefined;
}

/**
 * One pass over the body's bytes: its members, a long `prompt` of ids read as the pass reaches it, and where a large
 * body's conversation array (its messages) ends each element.
 */
function scanBody(task: BodyTask): Scanned {
  const completion = task.endpoint === 'completion' || task.endpoint === 'route';
  const member = task.bytes.length >= REUSE_MIN_BYTES ? conversationMember(task.endpoint) : undefined;
  const messages = member === undefined ? undefined : messagesReader(task.bytes, member);
  let prompt: Scanned['prompt'];
  let prompts = 0;
  const readArray = (key: string, start: number): number | undefined => {
    if (key === member) return messages!.read(key, start);
    if (key !== 'prompt' || !completion) return undefined;
    prompts++;
    const read = jsonIdArray(task.bytes, start);
    if (read !== undefined && read.end - start >= ID_PROMPT_BYTES) prompt = { ids: read.ids, start, end: read.end };
    return read?.end;
  };
  try {
    const members = jsonByteMembers(task.bytes, completion || member !== undefined ? readArray : undefined);
    // A repeated `prompt` (JSON.parse keeps the last) or a chat's `/v1/route` body: parsed as JSON.
    const chat = task.endpoint === 'route' && members.some((m) => m.key === 'messages');
    const span = messages?.span();
    return {
      members,
      prompt: prompts === 1 && !chat ? prompt : undefined,
      messages: span && { member: member!, ...span },
    };
  } catch {
    return { members: undefined };
  }
}

const ONE_ID = Buffer.from('[0]');

/**
 * The body parsed with its prompt's ids already read: the rest parsed and checked as JSON with one id in their place,
 * then the ids set as `prompt` (a Uint32Array: json-lazy.ts outlines it as the array it stands for, prompt-task.ts
 * takes it as the ids). The placeholder is a valid prompt, and what it replaces was read as one, so the checks pass
 * or fail as on the whole body; on any failure undefined, and the whole body is parsed for the error it gives.
 */
function parseWithIds(task: BodyTask, prompt: NonNullable<Scanned['prompt']>): ParsedBody | undefined {
  const b = task.bytes;
  try {
    const rest = bodyText(Buffer.concat([b.subarray(0, prompt.start), ONE_ID, b.subarray(prompt.end)]));
    const parsed = parseRequestBody(rest, task.endpoint, task);
    if (parsed.endpoint !== 'completion') return undefined;
    parsed.body.prompt = prompt.ids;
    return parsed;
  } catch {
    return undefined;
  }
}

/** A body's conversation key and where its conversation array lies (`keepBody` keeps this turn's body under it). */
interface Reuse {
  readonly key: string;
  readonly member: string;
  readonly span: MessagesSpan;
}

/**
 * A large body parsed from where it stops repeating its conversation's last one (body-reuse.ts), kept on one
 * of this thread's models; undefined when there is none to reuse or the shortened parse fails (the caller parses
 * the whole body). Throws what `checkRequestBody` throws, as for the whole body (the object is the same).
 */
function parseReused(
  task: BodyTask,
  models: ReadonlyMap<string, ModelPreprocessor>,
  reuse: Reuse | undefined,
): ParsedBody | undefined {
  if (reuse === undefined) return undefined;
  for (const model of models.values()) {
    const kept = model.lastBody(reuse.key);
    if (kept === undefined) continue;
    const reused = reusableMessages(kept, task.bytes, reuse.span);
    const body = reused === 0 ? undefined : parseReusing(task.bytes, reuse.member, reuse.span, kept, reused);
    return body === undefined ? undefined : checkRequestBody(body, task.endpoint, task);
  }
  return undefined;
}

function reuseOf(task: BodyTask, scanned: Scanned): Reuse | undefined {
  const span = scanned.messages;
  const key = span === undefined ? undefined : bodyKey(task.bytes, span);
  return key === undefined ? undefined : { key, member: span!.member, span: span! };
}

/**
 * Keeps the body for its conversation's next turn in its model's conversation cache (when on); true when the entry
 * holds the task's own bytes, which then stay here: a query-only request (`/v1/route`, or one annotated so) never
 * forwards its body, so its moved buffer need not go back, nor be copied to be kept.
 */
function keepBody(
  task: BodyTask,
  reuse: Reuse | undefined,
  body: Record<string, unknown>,
  routed: { readonly queryOnly: boolean; readonly target: { readonly model: { readonly name: string } } },
  models: ReadonlyMap<string, ModelPreprocessor>,
): boolean {
  const conversation = reuse === undefined ? undefined : body[reuse.member];
  const model = models.get(routed.target.model.name);
  if (reuse === undefined || !Array.isArray(conversation) || model?.keepsBodies !== true) return false;
  const own = (routed.queryOnly || task.endpoint === 'route') && ownBuffer(task.bytes) !== undefined;
  const entry = bodyEntry(task.bytes, reuse.span, conversation, own);
  if (entry === undefined) return false;
  model.keepBody(reuse.key, entry);
  return own;
}

/** The served models as the lookup reads them, from the snapshot a task brought (tokenizer-task.ts reads it too). */
export function servedOf(views: readonly ModelView[]): Map<string, ServedModel> {
  return new Map(
    views.map((m) => [m.name, { model: m, port: { adapters: () => m.adapters, readsTokenIds: m.readsTokenIds } }]),
  );
}

/**
 * Parses, checks and preprocesses a body. Throws what the main thread would throw before the model's availability
 * (see request-parse.ts); a failure of the prompt comes back as `promptError`.
 */
export async function runBodyTask(
  task: BodyTask,
  models: ReadonlyMap<string, ModelPreprocessor>,
): Promise<BodyOutcome> {
  const scanned = scanBody(task);
  const reuse = reuseOf(task, scanned);
  const parsed =
    (scanned.prompt !== undefined ? parseWithIds(task, scanned.prompt) : undefined) ??
    parseReused(task, models, reuse) ??
    parseRequestBody(bodyText(task.bytes), task.endpoint, task);
  const { body } = parsed;
  const routed = routeRequestBody(parsed, servedOf(task.models), task.headers, task.bytes);
  const kept = keepBody(task, reuse, body, routed, models);
  const members = scanned.members ?? jsonByteMembers(task.bytes);
  const { light, outlines } = outlineJsonObject(body, members);
  let result: PreprocessResult | undefined;
  let promptError: WorkerError | undefined;
  try {
    if (!routed.task.ok) throw routed.task.error;
    const model = models.get(routed.target.model.name);
    if (model === undefined) throw new Error(`model ${routed.target.model.name} is not loaded on this thread`);
    result = await model.run(routed.task.task);
  } catch (err) {
    promptError = workerError(err);
  }
  const { hints } = routed;
  return {
    clientModel: body.model as string,
    endpoint: parsed.endpoint,
    model: routed.target.model.name,
    loraName: routed.target.loraName,
    stream: body.stream === true,
    // A Set costs far more to clone than the array it is built from (tens of milliseconds for 65,536 ids).
    hints: hints.allowedWorkerIds === undefined ? hints : { ...hints, allowedWorkerIds: [...hints.allowedWorkerIds] },
    queryOnly: routed.queryOnly,
    forward: {
      // Moved here (they own their buffer), they go back the same way (workers/preprocess.ts's transfer list),
      // unless kept here for the next turn.
      bytes: ownBuffer(task.bytes) !== undefined && !kept ? task.bytes : undefined,
      kept,
      members,
      light,
      outlines,
      fields: routed.forwardFields,
    },
    result,
    promptError,
  };
}
