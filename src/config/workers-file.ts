/**
 * A model's `workers_file`: more workers of that model in a YAML or JSON file
 * (`workers: [...]`, each entry exactly a `models[].workers[]` entry) that
 * kvgate re-reads whenever it changes. The file is validated as the config
 * is: every problem with its field path and line, unknown keys refused, ids
 * unique in the file and unused by the rest of the gateway, and the model's
 * cross-field rules (roles, KV events in KV mode) over its static and file
 * workers together. A file with any problem is refused whole.
 */
import { KvgateError } from '../errors/index.js';
import { configProblemsError, positionOf, readConfigFile } from './load.js';
import { ConfigReader, isPlainObject, type ConfigProblem, type FieldPath } from './reader.js';
import { checkModel, readWorkers } from './resolve-model.js';
import type { ModelConfig, WorkerConfig } from './types.js';

/**
 * Reads and validates `model.workersFile`. `taken` names the ids other workers of the gateway hold
 * (id -> who holds it, for the message). `consequence` ends the error's first line.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG listing every problem (`detail.problems`).
 */
export function loadWorkersFile(
  model: ModelConfig,
  taken: ReadonlyMap<number, string>,
  consequence: string,
): WorkerConfig[] {
  const file = model.workersFile;
  if (file === undefined) throw new KvgateError('KVG_ERR_INVALID_CONFIG', `model ${model.name} has no workers_file`);
  const parsed = readConfigFile(file, consequence);
  const problems: ConfigProblem[] = [];
  const sourceOf = (path: FieldPath): { source: string; position?: string | undefined } => ({
    source: file,
    position: positionOf(parsed, path),
  });
  const root = new ConfigReader(isPlainObject(parsed.data) ? parsed.data : {}, [], problems, sourceOf);
  if (!isPlainObject(parsed.data)) root.problemAt([], 'must be a mapping with a workers list');
  root.allowOnly(['workers']);
  if (root.node.workers === undefined || root.node.workers === null)
    root.problem('workers', 'is required (an empty list removes every worker of the file)');
  const names = { name: model.name, servedModelName: model.servedModelName, loraAdapters: model.loraAdapters };
  const workers = readWorkers(root, model.engine, names, false);
  const seen = new Map<number, number>();
  workers.forEach((w, i) => {
    if (Number.isNaN(w.id)) return;
    const first = seen.get(w.id);
    const holder = taken.get(w.id);
    if (first !== undefined)
      root.problemAt(
        ['workers', i, 'id'],
        `${w.id} is already the id of workers[${first}]; worker ids are unique across the gateway`,
      );
    else if (holder !== undefined)
      root.problemAt(
        ['workers', i, 'id'],
        `${w.id} is already the id of ${holder}; worker ids are unique across the gateway`,
      );
    seen.set(w.id, first ?? i);
  });
  // The rules of the model over every worker it would have; the file's come first so their paths are the file's.
  checkModel({ ...model, workers: [...workers, ...model.workers] }, root, []);
  if (problems.length > 0) throw configProblemsError(problems, consequence);
  return workers;
}
