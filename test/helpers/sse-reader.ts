/**
 * A client that reads an SSE answer at a pace of its own, over node:http (so
 * a paused reader really stops taking bytes off its socket and the gateway's
 * buffers fill): straight, with pauses, slower than the engine, or not at all
 * after its first bytes.
 */
import { request } from 'node:http';

export interface Pace {
  /** After every this many bytes read, pause for `pauseMs` (0: never). */
  readonly pauseEveryBytes?: number;
  readonly pauseMs?: number;
  /**
   * Stop reading once this many bytes have been read, until `resumeWhen` resolves. A paused reader does not
   * see its connection closed either (its socket is not read): it learns of a cut once it reads again.
   */
  readonly stopAfterBytes?: number;
  readonly resumeWhen?: () => Promise<unknown>;
}

export interface SseRead {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  /** Each event's data, in order (`[DONE]` included); an event named by an `event:` line is left out (see `text`). */
  readonly events: string[];
  /** The body as read, every event included (the agent APIs name theirs: `event: message_stop`, ...). */
  readonly text: string;
  /** 'end': the body ended cleanly; 'cut': the connection closed before the body's end. */
  readonly ending: 'end' | 'cut';
  /** Milliseconds from the request to its ending. */
  readonly ms: number;
}

/** POSTs `body` as JSON (with `headers` besides) to `url` and reads the SSE answer at `pace`; resolves once the body ends or is cut. */
export function readSse(
  url: string,
  body: unknown,
  pace: Pace = {},
  headers: Record<string, string> = {},
): Promise<SseRead> {
  const started = performance.now();
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...headers } },
      (res) => {
        let text = '';
        let read = 0;
        let nextPause = pace.pauseEveryBytes ?? 0;
        let settled = false;
        let stopped = false;
        const settle = (ending: 'end' | 'cut'): void => {
          if (settled) return;
          settled = true;
          const events = text
            .split('\n\n')
            .filter((e) => e.startsWith('data: '))
            .map((e) => e.slice('data: '.length));
          resolve({
            status: res.statusCode ?? 0,
            headers: res.headers,
            events,
            text,
            ending,
            ms: performance.now() - started,
          });
        };
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text += chunk;
          read += Buffer.byteLength(chunk);
          if (pace.stopAfterBytes !== undefined && read >= pace.stopAfterBytes && !stopped) {
            stopped = true;
            res.pause();
            void (pace.resumeWhen?.() ?? new Promise(() => undefined)).then(
              () => res.resume(),
              (err: unknown) => {
                res.destroy();
                reject(err as Error);
              },
            );
            return;
          }
          if (nextPause > 0 && read >= nextPause) {
            nextPause = read + pace.pauseEveryBytes!;
            res.pause();
            setTimeout(() => res.resume(), pace.pauseMs ?? 0);
          }
        });
        res.on('end', () => settle('end'));
        res.on('error', () => settle('cut'));
        res.on('close', () => settle(res.complete ? 'end' : 'cut'));
      },
    );
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}

/** The token chunks of an OpenAI stream, in order: chunks whose choice carries `text` (completions) or a `delta` without `role` (chat). */
export function tokenChunks(events: readonly string[]): number {
  let n = 0;
  for (const e of events) {
    if (e === '[DONE]') continue;
    const choice = (JSON.parse(e) as { choices?: { text?: string; delta?: { role?: string; content?: string } }[] })
      .choices?.[0];
    if (choice === undefined) continue;
    if (typeof choice.text === 'string' || (choice.delta !== undefined && choice.delta.role === undefined)) n++;
  }
  return n;
}

/** The `usage` of the stream's usage chunk (`stream_options.include_usage`), if any. */
export function streamUsage(events: readonly string[]): { completion_tokens: number } | undefined {
  for (const e of events) {
    if (e === '[DONE]') continue;
    const u = (JSON.parse(e) as { usage?: { completion_tokens: number } | null }).usage;
    if (u != null && (JSON.parse(e) as { choices: unknown[] }).choices.length === 0) return u;
  }
  return undefined;
}

/** One event of a stream as the agent APIs write them: its `event:` name (undefined without one) and its data. */
export interface NamedEvent {
  readonly event: string | undefined;
  readonly data: string;
}

/** Every event of `r`'s body, named or not, in order (LF or CRLF line ends). */
export function namedEvents(r: SseRead): NamedEvent[] {
  return r.text
    .split(/\r?\n\r?\n/)
    .filter((block) => block.length > 0)
    .map((block) => {
      let event: string | undefined;
      const data: string[] = [];
      for (const line of block.split(/\r?\n/)) {
        if (line.startsWith('event: ')) event = line.slice('event: '.length);
        else if (line.startsWith('data: ')) data.push(line.slice('data: '.length));
      }
      return { event, data: data.join('\n') };
    });
}
