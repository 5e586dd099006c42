/**
 * A large request body, handled on a preprocessing thread from its bytes to
 * its routing inputs (protocol.ts `BodyTask`): UTF-8 check, JSON parse and
 * schema (request-parse.ts, as the main thread does for a small body), model
 * and hints against the snapshot of the served models sent along, the prompt
 * task, then rendering, tokenizing and hashing. What goes back is bounded by
 * what routing reads, not by the body: the engine's body as text with its
 * members' positions, the light members' values and the heavy ones' outlines
 * (common's json-lazy.ts), the hints, and the prompt's ids and hashes.
 */
import { jsonMembers, jsonSplice, outlineJsonObject, withJsonMembers, type JsonMember } from '../../common/index.js';
import { bodyText } from '../body.js';
import { parseRequestBody, routeRequestBody, type ServedModel } from '../request-parse.js';
import type { ModelPreprocessor } from './model-preprocessor.js';
import {
  workerError,
  type BodyOutcome,
  type BodyTask,
  type ModelView,
  type PreprocessResult,
  type WorkerError,
} from './protocol.js';

/** The engine's body text and members: the client's text when nothing changes and no key repeats, else joined slices. */
function forwardText(
  text: string,
  fields: Readonly<Record<string, unknown>> | undefined,
): { text: string; members: JsonMember[] } {
  const members = jsonMembers(text);
  if (fields === undefined && new Set(members.map((m) => m.key)).size === members.length) return { text, members };
  return jsonSplice(text, members, fields);
}

function servedOf(views: readonly ModelView[]): Map<string, ServedModel> {
  return new Map(views.map((m) => [m.name, { model: m, port: { adapters: () => m.adapters } }]));
}

/**
 * Parses, checks and preprocesses a body. Throws what the main thread would throw before the model's availability
 * (see request-parse.ts); a failure of the prompt comes back as `promptError`.
 */
export async function runBodyTask(
  task: BodyTask,
  models: ReadonlyMap<string, ModelPreprocessor>,
): Promise<BodyOutcome> {
  const text = bodyText(task.bytes);
  const parsed = parseRequestBody(text, task.endpoint, task);
  const { body } = parsed;
  const routed = routeRequestBody(parsed, servedOf(task.models), task.headers);
  const forward = forwardText(text, routed.forwardFields);
  const forwardBody = routed.forwardFields === undefined ? body : withJsonMembers(body, routed.forwardFields);
  const { light, outlines } = outlineJsonObject(forwardBody, forward.members);
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
    forward: { text: forward.text, members: forward.members, light, outlines },
    result,
    promptError,
  };
}
