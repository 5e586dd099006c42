/**
 * `kvgate register`: registers one engine in etcd for the gateways that
 * discover a model's workers there, and keeps it registered until SIGTERM or
 * SIGINT (then deletes the registration at once by revoking its lease).
 *
 * The key is `<prefix>/<model>/<id>` and its value the worker's JSON (url,
 * role, engine, dp ranks, KV-event endpoints, bootstrap, capacity), validated
 * before anything is written. It is attached to a lease of --ttl seconds that
 * this process keeps alive: when the process dies or loses etcd for longer
 * than the TTL, the lease expires, etcd deletes the key, and every gateway
 * drops the worker. What happens while etcd is away (keep-alives retried
 * with back-off, a lost lease granted again and the key put again) is
 * `EtcdRegistration`'s (`registration.ts`).
 */
import { pino } from 'pino';
import {
  etcdModelPrefix,
  etcdWorkerIdProblem,
  parseCommandArgs,
  parseEtcdWorkerId,
  readEtcdWorkerValue,
} from '../config/index.js';
import { KvgateError } from '../errors/index.js';
import { etcdClient } from '../fleet/index.js';
import { EtcdRegistration, type RegistrationLog, type RegistrationPlan } from './registration.js';

export const REGISTER_HELP = `usage: kvgate register --etcd URLS --model NAME --id N --url URL [options]

Registers one engine as a worker of a model in etcd under <prefix>/<model>/<id>,
with a lease that this command keeps alive; runs until SIGTERM or SIGINT, then
revokes the lease (the worker leaves at once). If the command dies, the lease
expires after --ttl seconds and the worker leaves then. While etcd is away it
retries with back-off (one line when keep-alives start failing, one when they
succeed again); a lease etcd no longer holds is granted again and the key put
again ("registration renewed").

  --etcd URLS                  etcd client endpoints, comma-separated (http://127.0.0.1:2379)
  --prefix P                   key prefix (/kvgate/workers)
  --model NAME                 the model, as the gateway's config names it
  --id N                       worker id, unique across the gateway
  --url URL                    the engine's base URL (http://host:port)
  --role aggregated|prefill|decode   disaggregation role (aggregated)
  --engine vllm|sglang         the engine's dialect (the model's engine)
  --dp-start N                 first data-parallel rank (0)
  --dp-size N                  data-parallel ranks (1)
  --kv-events ENDPOINT         KV-event ZMQ PUB endpoint (tcp://host:port)
  --kv-events-replay ENDPOINT  KV-event replay ROUTER endpoint
  --bootstrap-host H           SGLang prefill bootstrap host (the URL's host)
  --bootstrap-port P           SGLang prefill bootstrap port
  --max-num-batched-tokens N   the engine's token budget per step
  --total-kv-blocks N          the engine's KV-cache blocks
  --ttl S                      lease TTL in seconds, 2 to 3600 (10)
  -h, --help                   this text
`;

const OPTIONS = {
  etcd: { type: 'string', multiple: true },
  prefix: { type: 'string' },
  model: { type: 'string' },
  id: { type: 'string' },
  url: { type: 'string' },
  role: { type: 'string' },
  engine: { type: 'string' },
  'dp-start': { type: 'string' },
  'dp-size': { type: 'string' },
  'kv-events': { type: 'string' },
  'kv-events-replay': { type: 'string' },
  'bootstrap-host': { type: 'string' },
  'bootstrap-port': { type: 'string' },
  'max-num-batched-tokens': { type: 'string' },
  'total-kv-blocks': { type: 'string' },
  ttl: { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/** Flags whose values are integers in the registration value. */
const INT_FLAGS = ['dp-start', 'dp-size', 'bootstrap-port', 'max-num-batched-tokens', 'total-kv-blocks'] as const;
const STRING_FLAGS = ['url', 'role', 'engine', 'bootstrap-host'] as const;

/** What `kvgate register` was asked for: the registration, and where etcd is. */
export interface RegisterPlan extends RegistrationPlan {
  readonly help: boolean;
  readonly endpoints: string[];
}

const invalid = (flag: string, reason: string): KvgateError =>
  new KvgateError('KVG_ERR_INVALID_CONFIG', `--${flag}: ${reason}`, { field: flag });

function intFlag(flag: string, v: string): number {
  if (!/^-?\d+$/.test(v.trim())) throw invalid(flag, `${JSON.stringify(v)} is not an integer`);
  return Number(v);
}

/**
 * Turns argv into the key, value and lease to register, validated as the gateway validates a registration.
 * @throws KvgateError KVG_ERR_INVALID_CONFIG naming the flag for unknown flags, missing or invalid values.
 */
export function parseRegisterArgs(argv: string[]): RegisterPlan {
  let v: Record<string, string | string[] | boolean | undefined>;
  try {
    v = parseCommandArgs(argv, OPTIONS);
  } catch (err) {
    throw new KvgateError('KVG_ERR_INVALID_CONFIG', (err as Error).message, {});
  }
  if (v.help === true) return { help: true, endpoints: [], key: '', value: '', ttlS: 0 };
  const s = (k: string): string | undefined => v[k] as string | undefined;
  for (const flag of ['etcd', 'model', 'id', 'url']) if (v[flag] === undefined) throw invalid(flag, 'is required');
  const endpoints = (v.etcd as string[])
    .flatMap((e) => e.split(','))
    .map((e) => e.trim())
    .filter((e) => e !== '');
  if (endpoints.length === 0) throw invalid('etcd', 'lists no endpoint');
  for (const e of endpoints)
    if (!/^https?:\/\/[^/\s]+\/?$/.test(e)) throw invalid('etcd', `${e}: must be an http(s)://host:port endpoint`);
  const prefix = (s('prefix') ?? '/kvgate/workers').replace(/\/+$/, '');
  if (!prefix.startsWith('/')) throw invalid('prefix', 'must be a key path starting with /');
  const model = s('model')!;
  if (model === '' || /\s/.test(model)) throw invalid('model', 'must be a model name without whitespace');
  // The gateway's parse of a key's id: what is written here is read back as the same worker.
  const id = parseEtcdWorkerId(s('id')!);
  if (id === undefined) throw invalid('id', etcdWorkerIdProblem(s('id')!));
  const ttlS = s('ttl') === undefined ? 10 : intFlag('ttl', s('ttl')!);
  if (ttlS < 2 || ttlS > 3600) throw invalid('ttl', `${ttlS}: must be 2 to 3600 seconds`);
  const value: Record<string, unknown> = {};
  for (const flag of STRING_FLAGS) if (s(flag) !== undefined) value[flag.replace(/-/g, '_')] = s(flag);
  for (const flag of INT_FLAGS) if (s(flag) !== undefined) value[flag.replace(/-/g, '_')] = intFlag(flag, s(flag)!);
  const events = s('kv-events');
  const replay = s('kv-events-replay');
  if (replay !== undefined && events === undefined) throw invalid('kv-events-replay', 'needs --kv-events');
  if (events !== undefined) value.kv_events = replay === undefined ? events : { endpoint: events, replay };
  const engine = s('engine') === 'sglang' ? 'sglang' : 'vllm';
  const { problems } = readEtcdWorkerValue(value, id, { name: model }, engine, 'flags');
  const first = problems[0];
  if (first !== undefined) {
    const field = first.path.split('.')[0]!;
    const flag = field === 'kv_events' && first.path.endsWith('replay') ? 'kv-events-replay' : field.replace(/_/g, '-');
    throw invalid(flag, first.reason);
  }
  return { help: false, endpoints, key: `${etcdModelPrefix(prefix, model)}${id}`, value: JSON.stringify(value), ttlS };
}

export async function registerCommand(argv: string[]): Promise<number> {
  let plan: RegisterPlan;
  try {
    plan = parseRegisterArgs(argv);
  } catch (err) {
    process.stderr.write(`kvgate register: ${(err as Error).message}\n\n${REGISTER_HELP}`);
    return 2;
  }
  if (plan.help) {
    process.stdout.write(REGISTER_HELP);
    return 0;
  }
  const client = etcdClient(plan.endpoints);
  // The gateway's log format (pino JSON lines), so one log pipeline reads both.
  const logger = pino({ base: { svc: 'kvgate', role: 'register', key: plan.key } });
  const log: RegistrationLog = (level, msg, fields) => logger[level](fields ?? {}, msg);
  const stopped = new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  // Each process draws its own jitter, so a fleet that lost etcd together does not come back in step.
  const registration = new EtcdRegistration(client, plan, log, Math.random);
  registration.start();
  await stopped;
  await registration.stop();
  client.close();
  return 0;
}
