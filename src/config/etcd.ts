/**
 * etcd discovery: a model's `etcd` section (where its workers register) and
 * the registration value one engine puts under its key.
 *
 * Key layout: `<prefix>/<model>/<worker id>` (the model as the config names
 * it, slashes and all; the id in canonical decimal, `parseEtcdWorkerId`: `7`,
 * never `07`, `+7` or `7.0`, which would alias worker 7); the value is a JSON
 * object with the fields of a `models[].workers[]` entry except `id`, which is
 * the key's last segment.
 * A value is validated as a config worker is (unknown fields refused, every
 * problem with its field), plus the model's rule that a KV-aware model with
 * KV events on needs `kv_events`: a value with any problem is refused whole.
 */
import { KvgateError } from '../errors/index.js';
import { configProblemsError } from './load.js';
import { ConfigReader, isPlainObject, show, type ConfigProblem } from './reader.js';
import { checkModel, readWorkers } from './resolve-model.js';
import type { EngineDialect } from '../common/index.js';
import type { ModelConfig, WorkerConfig } from './types.js';

/** The key prefix a model's workers register under (with the trailing slash). */
export function etcdModelPrefix(prefix: string, model: string): string {
  return `${prefix}/${model}/`;
}

/**
 * The worker id a key's last segment (or `kvgate register --id`) names: a non-negative safe integer written as
 * JavaScript prints it, or undefined. Anything else (`07`, `+7`, `7.0`, ` 7`, `0x7`, `7e0`) is refused rather than
 * read as 7: two keys must never name one worker. The one parse of an etcd worker id, for the gateway and
 * `kvgate register` alike.
 */
export function parseEtcdWorkerId(segment: string): number | undefined {
  if (!/^[0-9]+$/.test(segment)) return undefined;
  const id = Number(segment);
  return Number.isSafeInteger(id) && String(id) === segment ? id : undefined;
}

/** Why `parseEtcdWorkerId` refused `segment`, for the lines and errors that name it. */
export function etcdWorkerIdProblem(segment: string): string {
  const rule = 'a non-negative integer in canonical decimal: no leading zero, sign, space or fraction';
  return `must be a worker id (${rule}), got ${JSON.stringify(segment)}`;
}

/** A registration value's problems (paths relative to the value), and the worker when there are none. */
export function readEtcdWorkerValue(
  value: unknown,
  id: number,
  names: { name: string; servedModelName?: string | undefined; loraAdapters?: readonly string[] | undefined },
  engine: EngineDialect,
  source: string,
): { worker: WorkerConfig | undefined; problems: ConfigProblem[] } {
  const problems: ConfigProblem[] = [];
  const root = new ConfigReader({}, [], problems, () => ({ source }));
  if (!isPlainObject(value)) {
    root.problemAt([], `must be a JSON object with url and the other worker fields, got ${show(value)}`);
    return { worker: undefined, problems };
  }
  if (value.id !== undefined)
    root.problemAt(['id'], "is not part of the value: the worker id is the key's last segment");
  const { id: _ignored, ...fields } = value;
  const reader = new ConfigReader({ workers: [{ ...fields, id }] }, [], problems, () => ({ source }));
  const worker = readWorkers(
    reader,
    engine,
    { name: names.name, servedModelName: names.servedModelName ?? names.name, loraAdapters: names.loraAdapters ?? [] },
    true,
  )[0];
  // Paths come out as workers[0].field; the value has no list around it.
  return {
    worker: problems.length === 0 ? worker : undefined,
    problems: problems.map((p) => ({ ...p, path: p.path.replace(/^workers\[0\]\.?/, '') || '(value)' })),
  };
}

/**
 * Reads one registration of `model`: `key` is under its prefix, `text` the value. `taken` names the ids
 * other workers of the gateway hold.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG listing every problem (`detail.problems`); nothing is applied.
 */
export function readEtcdWorker(
  model: ModelConfig,
  key: string,
  text: string,
  taken: ReadonlyMap<number, string>,
): WorkerConfig {
  const consequence = 'the registration is ignored';
  const source = `etcd key ${key}`;
  const etcd = model.etcd;
  if (etcd === undefined) throw new KvgateError('KVG_ERR_INVALID_CONFIG', `model ${model.name} has no etcd section`);
  const idText = key.slice(etcdModelPrefix(etcd.prefix, model.name).length);
  const problem = (path: string, reason: string): KvgateError =>
    configProblemsError([{ source, path, reason }], consequence);
  const id = parseEtcdWorkerId(idText);
  if (id === undefined)
    throw problem('(key)', `must end in /<worker id>: its last segment ${etcdWorkerIdProblem(idText)}`);
  const holder = taken.get(id);
  if (holder !== undefined)
    throw problem('(key)', `worker id ${id} is already the id of ${holder}; worker ids are unique across the gateway`);
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw problem('(value)', `is not JSON: ${(err as Error).message}`);
  }
  const { worker, problems } = readEtcdWorkerValue(value, id, model, model.engine, source);
  if (worker !== undefined) {
    // The model's per-worker rules (KV events in KV mode); the fleet-wide role rules do not apply to one registration.
    const modelProblems: ConfigProblem[] = [];
    const reader = new ConfigReader({ workers: [value] }, [], modelProblems, () => ({ source }));
    checkModel({ ...model, workers: [worker], enforceDisagg: false }, reader, []);
    for (const p of modelProblems)
      if (p.path.startsWith('workers[0].')) problems.push({ ...p, path: p.path.slice('workers[0].'.length) });
  }
  if (problems.length > 0 || worker === undefined) throw configProblemsError(problems, consequence);
  return worker;
}
