/**
 * A gRPC client of Envoy's ext_proc service and of gRPC health, built from the
 * vendored protos with `@grpc/grpc-js` and `@grpc/proto-loader`: a test plays
 * Envoy's part (no Envoy can run here), sending the messages Envoy sends in
 * streamed mode and reading every answer in order.
 */
import { credentials, Metadata, type ClientDuplexStream, type Client, type ServiceError } from '@grpc/grpc-js';
import { loadProtocol, serviceOf } from '../../src/picker/protocol.js';
import { until } from './until.js';

type Msg = Record<string, unknown>;

/** One ext_proc stream: `send` a ProcessingRequest, `next` the following answer, `status` how the stream ended. */
export class ExtProcStream {
  readonly #call: ClientDuplexStream<Msg, Msg>;
  readonly #answers: Msg[] = [];
  #ended: { code: number; details: string } | undefined;

  constructor(call: ClientDuplexStream<Msg, Msg>) {
    this.#call = call;
    call.on('data', (m: Msg) => this.#answers.push(m));
    call.on('error', (e: ServiceError) => (this.#ended = { code: e.code, details: e.details }));
    call.on('status', (s: { code: number; details: string }) => (this.#ended ??= { code: s.code, details: s.details }));
  }

  send(m: Msg): void {
    this.#call.write(m);
  }

  /** The next `n` answers (waits for them). */
  async next(n = 1): Promise<Msg[]> {
    await until(() => this.#answers.length >= n || this.#ended !== undefined, `${n} ext_proc answers`, 10_000);
    if (this.#answers.length < n)
      throw new Error(`the stream ended (${JSON.stringify(this.#ended)}) after ${this.#answers.length} answers`);
    return this.#answers.splice(0, n);
  }

  /** How the stream ended (waits for it). */
  async status(): Promise<{ code: number; details: string }> {
    await until(() => this.#ended !== undefined, 'the ext_proc stream to end', 10_000);
    return this.#ended!;
  }

  /** Answers received and not yet read. */
  get pending(): number {
    return this.#answers.length;
  }

  /** Half-closes (Envoy done with the stream). */
  end(): void {
    this.#call.end();
  }

  /** Resets the stream, as Envoy does when its client goes away. */
  cancel(): void {
    this.#call.cancel();
  }
}

type ProcessClient = Client & { Process(m?: Metadata): ClientDuplexStream<Msg, Msg> };
type HealthClient = Client & { Check(r: Msg, cb: (err: ServiceError | null, res?: { status: string }) => void): void };

export class ExtProcClient {
  readonly #extProc: ProcessClient;
  readonly #health: HealthClient;

  constructor(address: string) {
    const { extProc, health } = loadProtocol();
    this.#extProc = new (serviceOf(extProc, 'ExternalProcessor'))(
      address,
      credentials.createInsecure(),
    ) as unknown as ProcessClient;
    this.#health = new (serviceOf(health, 'Health'))(address, credentials.createInsecure()) as unknown as HealthClient;
  }

  open(): ExtProcStream {
    return new ExtProcStream(this.#extProc.Process(new Metadata()));
  }

  /** The health status of `service`, or the gRPC error code for an unknown one. */
  check(service: string): Promise<string | number> {
    return new Promise((resolve) =>
      this.#health.Check({ service }, (err, res) => resolve(err !== null ? err.code : res!.status)),
    );
  }

  close(): void {
    this.#extProc.close();
    this.#health.close();
  }
}

/** `request_headers` as Envoy sends them for a POST with a body (`raw_value` bytes), with optional metadata. */
export function requestHeaders(
  path: string,
  extra: Record<string, string> = {},
  filterMetadata?: Record<string, Record<string, unknown>>,
): Msg {
  const headers = Object.entries({
    ':method': 'POST',
    ':path': path,
    ':authority': 'gateway.example',
    'content-type': 'application/json',
    ...extra,
  }).map(([key, value]) => ({ key, raw_value: Buffer.from(value) }));
  return {
    request_headers: { headers: { headers }, end_of_stream: false },
    ...(filterMetadata === undefined ? {} : { metadata_context: { filter_metadata: structs(filterMetadata) } }),
  };
}

/** Plain objects as `google.protobuf.Struct`s by namespace (strings and lists of strings). */
export function structs(byNamespace: Record<string, Record<string, unknown>>): Msg {
  const value = (v: unknown): Msg =>
    Array.isArray(v) ? { listValue: { values: v.map(value) } } : { stringValue: String(v) };
  return Object.fromEntries(
    Object.entries(byNamespace).map(([ns, fields]) => [
      ns,
      { fields: Object.fromEntries(Object.entries(fields).map(([k, v]) => [k, value(v)])) },
    ]),
  );
}
