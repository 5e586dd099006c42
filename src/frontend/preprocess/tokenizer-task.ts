/**
 * A tokenizer endpoint's large body on a preprocessing thread (protocol.ts `TokenizerBodyTask`): the UTF-8 check and
 * the JSON parse (body.ts), then tokenize-request.ts over the snapshot of the served models sent along, as the main
 * thread runs it for a small body, then the model's tokenizer. Only the ids, or the text, go back; the body stays.
 */
import { bodyText, parseBodyObject } from '../body.js';
import { tokenizerJob } from '../tokenize-request.js';
import { servedOf } from './body-task.js';
import type { ModelPreprocessor } from './model-preprocessor.js';
import type { TokenizerBodyTask, TokenizerOutcome } from './protocol.js';

/**
 * Parses, checks and tokenizes (or decodes) a tokenizer endpoint's body.
 * @throws KvgateError what tokenize-request.ts and the tokenizer throw, as on the main thread.
 */
export async function runTokenizerTask(
  task: TokenizerBodyTask,
  models: ReadonlyMap<string, ModelPreprocessor>,
): Promise<TokenizerOutcome> {
  const body = parseBodyObject(bodyText(task.bytes));
  const views = new Map(task.models.map((m) => [m.name, m]));
  let clientModel = '';
  const job = tokenizerJob(task.endpoint, body, servedOf(task.models), {
    maxMessages: task.maxMessages,
    source: task.bytes,
    hasTokenizer: (name) => views.get(name)?.ownTokenizer === true,
    noteModel: (name) => (clientModel = name),
  });
  const model = models.get(job.model);
  if (model === undefined) throw new Error(`model ${job.model} is not loaded on this thread`);
  if (job.kind === 'text') return { clientModel, model: job.model, text: await model.decode(job.task.tokenIds) };
  return { clientModel, model: job.model, tokenIds: (await model.run(job.task)).tokenIds };
}
