/**
 * One engine's registration in etcd, kept for as long as `kvgate register`
 * runs: a key on a lease of `ttlS` seconds, the lease kept alive.
 *
 * - Registering: grant a lease, put the key on it. A failed attempt is one
 *   line, then the next after a `Backoff` (exponential from 0.5 s to 10 s,
 *   with jitter), however long etcd stays away.
 * - Keeping alive: one keep-alive every ttl/3 (what etcd's own client does).
 *   While they fail (etcd stopped or unreachable) the key stays as long as
 *   etcd holds the lease (an etcd that restarts with its data keeps its leases
 *   for a TTL after it is back): one line when they start failing, one when
 *   they succeed again, and in between a retry on a `Backoff` capped at the
 *   keep-alive interval, so the lease is renewed within a third of its TTL
 *   once etcd answers.
 * - Lost: etcd answers that it no longer holds the lease (it expired while
 *   kvgate could not reach etcd, or etcd lost its data): one line, and a new
 *   lease is granted and the key put again at once ("registration renewed").
 *
 * Each line carries how many times the registration was lost so far (`lost`);
 * `stop()` revokes the lease, so the worker leaves at once.
 */
import { EtcdLeaseInvalidError, type Etcd3, type Lease } from 'etcd3';
import { Backoff, type Rng } from '../common/index.js';

const REGISTER_RETRY_MIN_MS = 500;
const REGISTER_RETRY_MAX_MS = 10_000;
const KEEPALIVE_RETRY_MIN_MS = 250;

/** What is registered: the key, its value (JSON text) and the lease's TTL. */
export interface RegistrationPlan {
  readonly key: string;
  readonly value: string;
  readonly ttlS: number;
}

/** Writes one line: its level, message and fields. */
export type RegistrationLog = (level: 'info' | 'warn' | 'error', msg: string, fields?: Record<string, unknown>) => void;

export class EtcdRegistration {
  readonly #client: Etcd3;
  readonly #plan: RegistrationPlan;
  readonly #log: RegistrationLog;
  readonly #registerRetry: Backoff;
  readonly #keepAliveRetry: Backoff;
  /** Between keep-alives: a third of the TTL. */
  readonly #intervalMs: number;
  /** The lease the key is on, once registered. */
  #lease: Lease | undefined;
  #leaseId = '';
  #timer: NodeJS.Timeout | undefined;
  /** The operation in flight (register, keep-alive), awaited by `stop()`. */
  #busy: Promise<void> | undefined;
  #stopping = false;
  #lost = 0;
  /** Failed keep-alives in a row, and when the first of them failed (Date.now()). */
  #keepAliveFailures = 0;
  #failingSince = 0;

  /** `rng` draws the retries' jitter. */
  constructor(client: Etcd3, plan: RegistrationPlan, log: RegistrationLog, rng: Rng) {
    this.#client = client;
    this.#plan = plan;
    this.#log = log;
    this.#intervalMs = Math.round((plan.ttlS * 1000) / 3);
    this.#registerRetry = new Backoff(REGISTER_RETRY_MIN_MS, REGISTER_RETRY_MAX_MS, rng);
    this.#keepAliveRetry = new Backoff(Math.min(KEEPALIVE_RETRY_MIN_MS, this.#intervalMs), this.#intervalMs, rng);
  }

  /** Registers now, and keeps the registration until `stop()`. */
  start(): void {
    this.#schedule(0, () => this.#register());
  }

  /** Stops retrying and keeping alive, then revokes the lease: the key goes with it. */
  async stop(): Promise<void> {
    this.#stopping = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    await this.#busy;
    const lease = this.#lease;
    this.#lease = undefined;
    if (lease === undefined) return;
    try {
      await lease.revoke();
      this.#log('info', 'revoked: the worker leaves', { lease: this.#leaseId });
    } catch (err) {
      this.#log(
        'error',
        `cannot revoke the lease (${(err as Error).message}); the registration expires after ${this.#plan.ttlS} s`,
        { lease: this.#leaseId },
      );
    }
  }

  #schedule(ms: number, op: () => Promise<void>): void {
    if (this.#stopping) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#busy = op().finally(() => (this.#busy = undefined));
    }, ms);
  }

  /** Grants a lease and puts the key on it; on failure, tries again after the back-off. */
  async #register(): Promise<void> {
    // Kept alive here (keepaliveOnce), not by etcd3's loop, which retries every 100 ms without back-off.
    const lease = this.#client.lease(this.#plan.ttlS, { autoKeepAlive: false });
    try {
      const id = await lease.grant();
      await lease.put(this.#plan.key).value(this.#plan.value);
      this.#lease = lease;
      this.#leaseId = id;
    } catch (err) {
      // A lease granted without its key is freed (or, etcd gone again, expires).
      void lease.revoke().catch(() => undefined);
      if (this.#stopping) return;
      const retryInMs = this.#registerRetry.next();
      this.#log(
        'warn',
        `cannot register (attempt ${this.#registerRetry.attempts}): ${(err as Error).message}; retrying in ${retryInMs} ms`,
        { attempt: this.#registerRetry.attempts, retry_in_ms: retryInMs, lost: this.#lost },
      );
      this.#schedule(retryInMs, () => this.#register());
      return;
    }
    const attempts = this.#registerRetry.attempts + 1;
    this.#registerRetry.reset();
    this.#log('info', this.#lost === 0 ? 'registered' : 'registration renewed', {
      lease: this.#leaseId,
      ttl_s: this.#plan.ttlS,
      value: JSON.parse(this.#plan.value) as unknown,
      attempts,
      lost: this.#lost,
    });
    this.#schedule(this.#intervalMs, () => this.#keepAlive());
  }

  /** One keep-alive of the current lease, then the next one (or a retry, or a new registration). */
  async #keepAlive(): Promise<void> {
    const lease = this.#lease!;
    try {
      await lease.keepaliveOnce({ deadline: Date.now() + this.#intervalMs });
    } catch (err) {
      if (this.#stopping) return;
      if (err instanceof EtcdLeaseInvalidError) this.#leaseLost();
      else this.#keepAliveFailed(err as Error);
      return;
    }
    if (this.#keepAliveFailures > 0) {
      this.#log(
        'info',
        `keep-alive restored after ${this.#keepAliveFailures} failed attempts: the registration stands`,
        {
          lease: this.#leaseId,
          failed_attempts: this.#keepAliveFailures,
          failing_ms: Date.now() - this.#failingSince,
          lost: this.#lost,
        },
      );
    }
    this.#keepAliveFailures = 0;
    this.#keepAliveRetry.reset();
    this.#schedule(this.#intervalMs, () => this.#keepAlive());
  }

  /** etcd no longer holds the lease (its key went with it): register again at once. */
  #leaseLost(): void {
    this.#lost++;
    this.#log(
      'error',
      `registration lost: etcd no longer holds lease ${this.#leaseId} (it expired, or etcd lost its data); ` +
        'registering again',
      { lease: this.#leaseId, lost: this.#lost },
    );
    this.#lease = undefined;
    this.#keepAliveFailures = 0;
    this.#keepAliveRetry.reset();
    this.#schedule(0, () => this.#register());
  }

  /** A keep-alive that got no answer: logged when they start failing, retried after the back-off. */
  #keepAliveFailed(err: Error): void {
    if (this.#keepAliveFailures++ === 0) {
      this.#failingSince = Date.now();
      this.#log('warn', `keep-alive failing (${err.message}); retrying, the key stays while etcd holds the lease`, {
        lease: this.#leaseId,
        ttl_s: this.#plan.ttlS,
        lost: this.#lost,
      });
    }
    this.#schedule(this.#keepAliveRetry.next(), () => this.#keepAlive());
  }
}
