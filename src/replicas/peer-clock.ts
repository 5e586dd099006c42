/**
 * A peer replica's clock as seen from here, so the age of its messages can
 * be measured without comparing two processes' clocks. Each replica's clock
 * is its own monotonic `performance.now()`, whose zero is that process's
 * start: two replicas' readings differ by their start times (and, across
 * hosts, by anything else), so `now - sentAt` measured the skew, not the lag.
 *
 * Heartbeats carry echoes, in the manner of NTP's symmetric mode: replica B's
 * heartbeat repeats the send time `t0` of the last heartbeat it heard from A
 * and how long B held it (`held`, on B's clock). When A hears it at `t2` (its
 * own clock), the round trip is `rtt = t2 - t0 - held`, measured on A's clock
 * alone, and B's send time `s1` (B's clock) happened about `rtt / 2` before
 * `t2`: the offset of B's clock from A's is `s1 - (t2 - rtt / 2)`. The error
 * is at most half the round trip's asymmetry, whatever the skew. Of the last
 * few samples, the one with the shortest round trip (the least queueing in
 * it) gives the offset, as NTP's clock filter does.
 */

/** Samples kept per peer: the shortest round trip among them gives the offset. */
const SAMPLES = 8;

/** What a heartbeat echoes of the last heartbeat heard from one peer. */
export interface Echo {
  /** The incarnation of the replica whose heartbeat this echoes (a restarted replica ignores its former self's). */
  readonly incarnation: string;
  /** That heartbeat's send time, on its sender's clock (ms). */
  readonly sentAt: number;
  /** How long the echoing replica held it before this heartbeat left (ms, on the echoing replica's clock). */
  readonly heldMs: number;
}

export class PeerClock {
  readonly #samples: { rtt: number; offset: number }[] = [];
  /** The peer's last heartbeat: its send time (its clock) and when it was heard (ours). */
  #last: { sentAt: number; heardAt: number } | undefined;

  /**
   * Notes a heartbeat of the peer heard at `now`, to echo it in ours. A heartbeat cut into several messages
   * (fit.ts) is held from its first: the later ones' arrival would shorten the hold and lengthen the round trip.
   */
  heard(sentAt: number, now: number): void {
    if (this.#last?.sentAt === sentAt) return;
    this.#last = { sentAt, heardAt: now };
  }

  /** The echo of the peer's last heartbeat for our heartbeat leaving at `now` (undefined before one was heard). */
  echo(incarnation: string, now: number): Echo | undefined {
    const l = this.#last;
    return l === undefined ? undefined : { incarnation, sentAt: l.sentAt, heldMs: Math.max(0, now - l.heardAt) };
  }

  /**
   * A heartbeat of the peer, sent at `peerSentAt` (its clock) and heard at `now`, echoed ours:
   * one sample of the offset. Returns the round trip (ms), or undefined for an impossible one
   * (negative: the echo cannot be ours).
   */
  sample(echo: Echo, peerSentAt: number, now: number): number | undefined {
    const rtt = now - echo.sentAt - echo.heldMs;
    if (!(rtt >= 0)) return undefined;
    this.#samples.push({ rtt, offset: peerSentAt - (now - rtt / 2) });
    if (this.#samples.length > SAMPLES) this.#samples.shift();
    return rtt;
  }

  /** The peer's clock minus ours (ms), from the sample with the shortest round trip; undefined before any. */
  get offset(): number | undefined {
    let best: { rtt: number; offset: number } | undefined;
    for (const s of this.#samples) if (best === undefined || s.rtt < best.rtt) best = s;
    return best?.offset;
  }

  /**
   * Age (ms) at `now` of a message the peer stamped `peerSentAt` on its clock: undefined while no
   * round trip has given the offset. Never negative (the estimate's error can exceed a short lag).
   */
  ageOf(peerSentAt: number, now: number): number | undefined {
    const offset = this.offset;
    return offset === undefined ? undefined : Math.max(0, now - (peerSentAt - offset));
  }
}
