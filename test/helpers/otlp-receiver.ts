/**
 * A collector double that speaks OTLP/HTTP with the JSON encoding (what `kvgate serve`'s exporter sends): an HTTP
 * server on loopback that takes `POST /v1/traces` ExportTraceServiceRequest bodies, answers 200 `{}` and keeps
 * every span, with its ids in hex, its attributes as plain values and its status; or, while told to refuse, answers
 * every export with an error status and keeps nothing (a collector that refuses, then takes exports again). It can
 * answer a partial success (OTLP's `partialSuccess`, some spans rejected), and hold exports unanswered until told
 * how to answer them (a collector that fails an export in flight).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  attributes: Record<string, unknown>;
  /** 0 unset, 1 ok, 2 error. */
  statusCode: number;
  statusMessage: string;
  traceState: string;
  /** The span ids of the spans it links to. */
  links: string[];
}

export interface OtlpReceiver {
  readonly url: string;
  readonly spans: OtlpSpan[];
  /** The raw bodies posted, as text. */
  readonly bodies: string[];
  /** Exports posted so far, refused ones included. */
  posts(): number;
  /** Answers each export with `status` from now on (500: a failure the exporter does not retry); undefined: 200 again. */
  refuse(status: number | undefined): void;
  /** Answers each export taken with `partialSuccess` from now on (OTLP/JSON: `rejectedSpans` as a string); undefined: `{}`. */
  partialSuccess(rejectedSpans: number | undefined, errorMessage?: string): void;
  /** Holds each export from now on, unanswered, until `release`. */
  hold(): void;
  /** Exports held now. */
  held(): number;
  /** Answers the exports held with `status` (and stops holding): 200 takes them, another status refuses them. */
  release(status: number): void;
  close(): Promise<void>;
}

/** OTLP/JSON ids are hex; an exporter set to base64 ids is read too. */
function hexId(id: unknown): string {
  const s = typeof id === 'string' ? id : '';
  return /^[0-9a-f]*$/.test(s) ? s : Buffer.from(s, 'base64').toString('hex');
}

function attributeValue(v: Record<string, unknown>): unknown {
  if ('intValue' in v) return Number(v.intValue);
  if ('doubleValue' in v) return Number(v.doubleValue);
  return v.stringValue ?? v.boolValue;
}

function spanOf(s: Record<string, unknown>): OtlpSpan {
  const attributes: Record<string, unknown> = {};
  for (const a of (s.attributes as { key: string; value: Record<string, unknown> }[] | undefined) ?? [])
    attributes[a.key] = attributeValue(a.value);
  const status = (s.status ?? {}) as { code?: unknown; message?: unknown };
  return {
    traceId: hexId(s.traceId),
    spanId: hexId(s.spanId),
    parentSpanId: hexId(s.parentSpanId ?? ''),
    name: String(s.name),
    attributes,
    statusCode: Number(status.code ?? 0),
    statusMessage: typeof status.message === 'string' ? status.message : '',
    traceState: typeof s.traceState === 'string' ? s.traceState : '',
    links: ((s.links as { spanId?: unknown }[] | undefined) ?? []).map((l) => hexId(l.spanId)),
  };
}

/** Every span of an OTLP ExportTraceServiceRequest (JSON encoding). */
function otlpSpans(body: unknown): OtlpSpan[] {
  const out: OtlpSpan[] = [];
  for (const rs of (body as { resourceSpans?: unknown[] }).resourceSpans ?? [])
    for (const ss of (rs as { scopeSpans?: unknown[] }).scopeSpans ?? [])
      for (const s of (ss as { spans?: Record<string, unknown>[] }).spans ?? []) out.push(spanOf(s));
  return out;
}

/** Starts the receiver on an OS-chosen loopback port. */
export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: OtlpSpan[] = [];
  const bodies: string[] = [];
  let posts = 0;
  let refusal: number | undefined;
  let answer = '{}';
  let holding: (() => void)[] | undefined;
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    const handle = (): void => {
      if (refusal !== undefined) {
        res.writeHead(refusal, { 'content-type': 'application/json' }).end('{}');
        return;
      }
      if (req.url === '/v1/traces' && String(req.headers['content-type']).includes('json')) {
        const text = Buffer.concat(chunks).toString('utf8');
        bodies.push(text);
        spans.push(...otlpSpans(JSON.parse(text)));
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(answer);
    };
    req
      .on('data', (c: Buffer) => chunks.push(c))
      .on('end', () => {
        posts++;
        if (holding !== undefined) holding.push(handle);
        else handle();
      });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    bodies,
    posts: () => posts,
    refuse: (status) => (refusal = status),
    partialSuccess: (rejectedSpans, errorMessage = '') =>
      (answer =
        rejectedSpans === undefined
          ? '{}'
          : JSON.stringify({ partialSuccess: { rejectedSpans: String(rejectedSpans), errorMessage } })),
    hold: () => (holding ??= []),
    held: () => holding?.length ?? 0,
    release: (status) => {
      const held = holding ?? [];
      holding = undefined;
      const before = refusal;
      refusal = status === 200 ? undefined : status;
      for (const handle of held) handle();
      refusal = before;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
