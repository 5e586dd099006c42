/**
 * `KubeListWatch`: one collection of the Kubernetes API kept current by the
 * API server's list + watch protocol (undici, no client library: see
 * kubernetes-source.ts for why). A list gives the objects and a
 * resourceVersion; a watch from it streams ADDED / MODIFIED / DELETED /
 * BOOKMARK events as JSON lines. A watch the server ends is resumed from the
 * last version seen; a 410 Gone lists again; any other failure keeps the
 * objects it has and retries on a `Backoff` (doubling, with jitter).
 * `onChange` gets every object after each list and each event; `onFailure`
 * each failure. `relist` lists again at once, the list or watch in flight
 * dropped: for a caller whose path changed (a selector).
 *
 * A watch the server ends without an event before `watchMinOpenMs` (1 s, as
 * client-go's "very short watch") is such a failure: an API server (or a proxy
 * in front of it) that ends every watch at once would otherwise have it
 * reopened in a tight loop. The back-off starts again from its minimum once a
 * watch delivers an event or stays open that long.
 *
 * A watch asks the server to end it after `timeoutSeconds` (as client-go
 * does), and one silent for longer than that plus a grace is failed here: a
 * connection a load balancer or NAT dropped without a reset delivers nothing
 * and never errors, and would otherwise leave the workers frozen for good.
 */
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { Agent, request } from 'undici';
import { Backoff, systemClock, type Clock, type Rng } from '../common/index.js';
import { systemScheduler, type Scheduler } from '../discovery/index.js';

const RETRY_MIN_MS = 500;
const RETRY_MAX_MS = 10_000;
/** The server ends each watch after this (client-go picks 5 to 10 minutes); the watch is then resumed. */
const WATCH_TIMEOUT_S = 300;
/** How long past `timeoutSeconds` a silent watch is given before it counts as a stalled connection. */
const WATCH_GRACE_MS = 30_000;
/** A watch ended by the server sooner than this without an event is a failed attempt (client-go's "very short watch"). */
const WATCH_MIN_OPEN_MS = 1_000;
/** A list's body silent for this long is a stalled connection (the Agent has no body timeout, for watches). */
const LIST_BODY_TIMEOUT_MS = 60_000;

export interface KubeObject {
  metadata?: { name?: string; resourceVersion?: string };
}
interface WatchEvent<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T & { code?: number; message?: string };
}
class Gone extends Error {}
/** The server ended a watch before `watchMinOpenMs` without an event. */
class ShortWatch extends Error {}

export interface KubeApi {
  readonly apiServer: string;
  readonly tokenFile: string;
  readonly caFile: string;
}

/** The API server's client: one undici Agent (the cluster CA when https), the service-account token read per call. */
export class KubeClient {
  readonly #api: KubeApi;
  readonly #dispatcher: Agent;
  readonly #abort = new AbortController();

  constructor(api: KubeApi) {
    this.#api = api;
    const ca = api.apiServer.startsWith('https:') ? readOptional(api.caFile) : undefined;
    this.#dispatcher = new Agent({ connect: ca === undefined ? {} : { ca }, bodyTimeout: 0 });
  }

  /**
   * GET `path`: the 200 answer, or an error naming the status (410 as `Gone`). Its body fails when no byte of it
   * arrives for `bodyTimeoutMs` (default: a list's), or once `signal` (or the client's close) aborts it.
   */
  async get(
    path: string,
    bodyTimeoutMs = LIST_BODY_TIMEOUT_MS,
    signal?: AbortSignal,
  ): Promise<Awaited<ReturnType<typeof request>>> {
    const token = readOptional(this.#api.tokenFile)?.trim();
    const res = await request(`${this.#api.apiServer}${path}`, {
      dispatcher: this.#dispatcher,
      signal: signal === undefined ? this.#abort.signal : AbortSignal.any([this.#abort.signal, signal]),
      bodyTimeout: bodyTimeoutMs,
      headers: { accept: 'application/json', ...(token === undefined ? {} : { authorization: `Bearer ${token}` }) },
    });
    if (res.statusCode === 200) return res;
    const text = await res.body.text().catch(() => '');
    if (res.statusCode === 410) throw new Gone('resourceVersion too old (410 Gone)');
    throw new Error(`API server answered ${res.statusCode} for ${path.split('?')[0]}: ${text.slice(0, 200)}`);
  }

  async close(): Promise<void> {
    this.#abort.abort();
    await this.#dispatcher.close().catch(() => undefined);
  }
}

export class KubeListWatch<T extends KubeObject> {
  readonly #client: KubeClient;
  readonly #onChange: (objects: T[]) => void;
  readonly #onFailure: (err: Error, retryInMs: number) => void;
  readonly #onRelist: ((err: Error) => void) | undefined;
  readonly #onLive: ((failures: number) => void) | undefined;
  /** Failed attempts since the list or watch last went through; -1 before it first does. */
  #failures = -1;
  /** Runs before each list (a caller re-reading what the path depends on); throws to fail the attempt. */
  readonly #beforeList: () => Promise<void>;
  readonly #path: () => string;
  #objects = new Map<string, T>();
  #resourceVersion: string | undefined;
  #timer: unknown;
  readonly #backoff: Backoff;
  readonly #clock: Clock;
  readonly #scheduler: Scheduler;
  #closed = false;
  /** The list or watch in flight, aborted by `relist` and `close`; each run holds its own (a stale run stops). */
  #request = new AbortController();
  #gones = 0;
  readonly #watchTimeoutS: number;
  readonly #watchGraceMs: number;
  readonly #watchMinOpenMs: number;

  constructor(opts: {
    client: KubeClient;
    path: () => string;
    onChange: (objects: T[]) => void;
    onFailure: (err: Error, retryInMs: number) => void;
    /** A watch fallen behind (410 Gone): listing again at once. */
    onRelist?: (err: Error) => void;
    /** A list or watch went through: the first time, and after each run of `failures` failed attempts. */
    onLive?: (failures: number) => void;
    beforeList?: () => Promise<void>;
    /** The server-side watch timeout (`timeoutSeconds`) and the grace past it; tests shorten them. */
    watchTimeoutS?: number;
    watchGraceMs?: number;
    /** How long a watch ended with no event must have been open not to be a failed attempt (1 s). */
    watchMinOpenMs?: number;
    /** The retries' jitter (`Math.random`), the clock a watch's time open is read on, and the retry timers. */
    rng?: Rng;
    clock?: Clock;
    scheduler?: Scheduler;
  }) {
    this.#client = opts.client;
    this.#path = opts.path;
    this.#onChange = opts.onChange;
    this.#onFailure = opts.onFailure;
    this.#onRelist = opts.onRelist;
    this.#onLive = opts.onLive;
    this.#beforeList = opts.beforeList ?? (() => Promise.resolve());
    this.#watchTimeoutS = opts.watchTimeoutS ?? WATCH_TIMEOUT_S;
    this.#watchGraceMs = opts.watchGraceMs ?? WATCH_GRACE_MS;
    this.#watchMinOpenMs = opts.watchMinOpenMs ?? WATCH_MIN_OPEN_MS;
    this.#backoff = new Backoff(RETRY_MIN_MS, RETRY_MAX_MS, opts.rng ?? Math.random);
    this.#clock = opts.clock ?? systemClock;
    this.#scheduler = opts.scheduler ?? systemScheduler;
  }

  start(): void {
    void this.#run(true, this.#request);
  }

  close(): void {
    this.#closed = true;
    this.#request.abort();
    if (this.#timer !== undefined) this.#scheduler.clearTimeout(this.#timer);
  }

  /**
   * Lists again now (after `beforeList`), the list or watch in flight dropped unreported: what the path depends on
   * changed (a selector). The objects stay until the new list replaces them; a retry waiting is run now.
   */
  relist(): void {
    if (this.#closed) return;
    this.#request.abort();
    if (this.#timer !== undefined) this.#scheduler.clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#request = new AbortController();
    void this.#run(true, this.#request);
  }

  async #run(list: boolean, run: AbortController): Promise<void> {
    if (this.#closed || run.signal.aborted) return;
    try {
      if (list || this.#resourceVersion === undefined) await this.#list(run.signal);
      await this.#watch(run.signal);
      void this.#run(false, run);
    } catch (err) {
      if (this.#closed || run.signal.aborted) return;
      // A first 410 is a watch fallen behind: list again at once; a second with no event between waits.
      if (err instanceof Gone && ++this.#gones === 1) {
        this.#onRelist?.(err);
        this.#resourceVersion = undefined;
        void this.#run(true, run);
        return;
      }
      this.#failures = Math.max(0, this.#failures) + 1;
      const retryInMs = this.#backoff.next();
      this.#onFailure(err as Error, retryInMs);
      const relist = err instanceof Gone || this.#resourceVersion === undefined;
      this.#timer = this.#scheduler.setTimeout(() => {
        this.#timer = undefined;
        void this.#run(relist, run);
      }, retryInMs);
    }
  }

  async #list(signal: AbortSignal): Promise<void> {
    await this.#beforeList();
    signal.throwIfAborted();
    const res = await this.#client.get(this.#path(), LIST_BODY_TIMEOUT_MS, signal);
    const body = (await res.body.json()) as { metadata?: { resourceVersion?: string }; items?: T[] };
    signal.throwIfAborted();
    this.#objects = new Map((body.items ?? []).map((o) => [o.metadata?.name ?? '', o]));
    this.#resourceVersion = body.metadata?.resourceVersion;
    this.#live();
    this.#onChange([...this.#objects.values()]);
  }

  /** The list or watch went through: tell `onLive` the first time and after failures. */
  #live(): void {
    if (this.#failures === 0) return;
    const failures = Math.max(0, this.#failures);
    this.#failures = 0;
    this.#onLive?.(failures);
  }

  async #watch(signal: AbortSignal): Promise<void> {
    const rv =
      this.#resourceVersion === undefined ? '' : `&resourceVersion=${encodeURIComponent(this.#resourceVersion)}`;
    const res = await this.#client.get(
      `${this.#path()}&watch=1&allowWatchBookmarks=true&timeoutSeconds=${this.#watchTimeoutS}${rv}`,
      this.#watchTimeoutS * 1000 + this.#watchGraceMs,
      signal,
    );
    this.#live();
    const openedAt = this.#clock.now();
    let events = 0;
    const lines = createInterface({ input: res.body, crlfDelay: Infinity });
    try {
      for await (const line of lines) {
        // A line read before a relist dropped this watch is not the new selector's.
        signal.throwIfAborted();
        if (line.trim() === '') continue;
        this.#event(JSON.parse(line) as WatchEvent<T>);
        events++;
      }
    } finally {
      res.body.destroy();
    }
    const openMs = this.#clock.now() - openedAt;
    if (events === 0 && openMs < this.#watchMinOpenMs)
      throw new ShortWatch(`the API server ended the watch after ${Math.round(openMs)} ms with no event`);
    // A watch that stayed open its while (the server's timeoutSeconds, for one) is healthy: resumed at once.
    this.#backoff.reset();
  }

  #event(e: WatchEvent<T>): void {
    if (e.type === 'ERROR') {
      if (e.object.code === 410) throw new Gone(e.object.message ?? 'resourceVersion too old (410 Gone)');
      throw new Error(`watch error ${e.object.code ?? ''} ${e.object.message ?? ''}`.trim());
    }
    const rv = e.object.metadata?.resourceVersion;
    if (rv !== undefined) this.#resourceVersion = rv;
    this.#gones = 0;
    // The watch delivers: the next failure waits the minimum again.
    this.#backoff.reset();
    if (e.type === 'BOOKMARK') return;
    const name = e.object.metadata?.name ?? '';
    if (e.type === 'DELETED') this.#objects.delete(name);
    else this.#objects.set(name, e.object);
    this.#onChange([...this.#objects.values()]);
  }
}

function readOptional(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}
