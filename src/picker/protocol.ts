/**
 * Envoy's external-processing protocol as the picker speaks it: the vendored
 * protos (`vendor/proto`: envoy's data-plane-api, cncf/xds, protoc-gen-validate,
 * grpc-proto, each with its license) loaded with `@grpc/proto-loader`, the
 * message shapes the picker reads and writes, and the builders of its answers.
 *
 * Field names keep the protos' snake case (`keepCase`), so a message here
 * reads as Envoy's documentation spells it; a oneof's chosen member is named
 * by its virtual field (`request`, `response`). The well-known types
 * (`google.protobuf.Struct` and `Value`) come from protobufjs's bundled
 * definitions, whose fields are camel case (`stringValue`, `structValue`).
 */
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadPackageDefinition, type GrpcObject, type ServiceClientConstructor } from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { KvgateError } from '../errors/index.js';

/** The vendored protos: `vendor/proto` of the package, found from src/picker (tests) or dist/src/picker (built). */
function protoDir(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    const candidate = join(dir, 'vendor', 'proto');
    if (existsSync(candidate)) return candidate;
    dir = dirname(dir);
  }
  throw new KvgateError('KVG_ERR_INTERNAL', 'cannot find vendor/proto (the ext_proc protos) in the kvgate package');
}

/** The header and metadata names of the Gateway API Inference Extension's endpoint-picker protocol (v1.0). */
export const EPP = {
  /** Request header and `envoy.lb` dynamic-metadata key: the picked endpoints, `ip:port` comma-separated, in order. */
  destination: 'x-gateway-destination-endpoint',
  /** The dynamic-metadata namespace of the answer and of the served-endpoint readback. */
  lbNamespace: 'envoy.lb',
  /** The filter-metadata namespace of the data plane's subset hint. */
  subsetNamespace: 'envoy.lb.subset_hint',
  subsetKey: 'x-gateway-destination-endpoint-subset',
  /** Response-side filter-metadata key (namespace `envoy.lb`): the endpoint that really served. */
  servedKey: 'x-gateway-destination-endpoint-served',
  /** The conformance harness's hooks: the pods a request must go to, and the served endpoint echoed back. */
  conformanceSelection: 'test-epp-endpoint-selection',
  conformanceServed: 'x-conformance-test-served-endpoint',
} as const;

/** The gRPC health service names the picker answers for (the proposal's "Health Checking"). */
export const HEALTH_SERVICES = ['', 'liveness', 'readiness', 'envoy.service.ext_proc.v3.ExternalProcessor'] as const;

export interface HeaderValue {
  key: string;
  value?: string;
  raw_value?: Buffer;
}
export interface ProtoValue {
  kind?: string;
  stringValue?: string;
  listValue?: { values?: ProtoValue[] };
  structValue?: ProtoStruct;
}
export interface ProtoStruct {
  fields?: Record<string, ProtoValue>;
}
interface HttpHeaders {
  headers?: { headers?: HeaderValue[] };
  end_of_stream?: boolean;
}
interface HttpBody {
  body?: Buffer;
  end_of_stream?: boolean;
}

/** One message of Envoy's stream (`ProcessingRequest`): the fields the picker reads. */
export interface ProcessingRequest {
  request?: string;
  request_headers?: HttpHeaders;
  request_body?: HttpBody;
  request_trailers?: unknown;
  response_headers?: HttpHeaders;
  response_body?: HttpBody;
  response_trailers?: unknown;
  metadata_context?: { filter_metadata?: Record<string, ProtoStruct> };
}

/** One answer (`ProcessingResponse`), as built below. */
export type ProcessingResponse = Record<string, unknown>;

const LOADER_OPTIONS = { keepCase: true, longs: Number, enums: String, defaults: false, oneofs: true } as const;

/** The `envoy.service.ext_proc.v3` and `grpc.health.v1` packages, loaded from the vendored protos. */
export function loadProtocol(): { extProc: GrpcObject; health: GrpcObject } {
  const definition = loadSync(['envoy/service/ext_proc/v3/external_processor.proto', 'grpc/health/v1/health.proto'], {
    ...LOADER_OPTIONS,
    includeDirs: [protoDir()],
  });
  const root = loadPackageDefinition(definition) as Record<string, GrpcObject>;
  const pkg = (path: string): GrpcObject =>
    path.split('.').reduce<GrpcObject>((o, k) => o[k] as GrpcObject, root as unknown as GrpcObject);
  return { extProc: pkg('envoy.service.ext_proc.v3'), health: pkg('grpc.health.v1') };
}

/** A service's client constructor in a loaded package (`ExternalProcessor`, `Health`). */
export function serviceOf(pkg: GrpcObject, name: string): ServiceClientConstructor {
  return pkg[name] as ServiceClientConstructor;
}

/** A header's value: Envoy sends `raw_value` bytes (and may send `value`). */
export function headerText(h: HeaderValue): string {
  return h.raw_value !== undefined && h.raw_value.length > 0 ? h.raw_value.toString('utf8') : (h.value ?? '');
}

/** The string, or the strings of a list, a metadata value holds (comma-separated entries split). */
export function metadataStrings(v: ProtoValue | undefined): string[] | undefined {
  if (v === undefined) return undefined;
  const raw =
    v.stringValue !== undefined
      ? [v.stringValue]
      : (v.listValue?.values ?? []).flatMap((x) => (x.stringValue !== undefined ? [x.stringValue] : []));
  return raw.flatMap((s) => s.split(',')).flatMap((s) => (s.trim() === '' ? [] : [s.trim()]));
}

function setHeaders(headers: Readonly<Record<string, string>>): Record<string, unknown> {
  return {
    set_headers: Object.entries(headers).map(([key, value]) => ({ header: { key, raw_value: Buffer.from(value) } })),
  };
}

/**
 * The answer to the request headers once an endpoint is picked: the destination header and the same value in
 * the `envoy.lb` dynamic metadata (the proposal: never two different values), the route cache cleared so the
 * data plane routes on it.
 */
export function pickedHeaders(endpoints: readonly string[]): ProcessingResponse {
  const list = endpoints.join(',');
  return {
    request_headers: {
      response: { clear_route_cache: true, header_mutation: setHeaders({ [EPP.destination]: list }) },
    },
    dynamic_metadata: {
      fields: {
        [EPP.lbNamespace]: {
          structValue: { fields: { [EPP.destination]: { stringValue: list } } },
        },
      },
    },
  };
}

/** Envoy's `StreamedBodyResponse` limit is 64 KiB a chunk; the reference picker keeps under it. */
const BODY_CHUNK_BYTES = 62_000;

/** A body passed on in streamed mode: one `*_body` answer per chunk, the last one ending the stream when `eos`. */
export function streamedBody(side: 'request_body' | 'response_body', body: Buffer, eos: boolean): ProcessingResponse[] {
  const out: ProcessingResponse[] = [];
  for (let at = 0; at === 0 || at < body.length; at += BODY_CHUNK_BYTES) {
    const chunk = body.subarray(at, at + BODY_CHUNK_BYTES);
    const last = at + BODY_CHUNK_BYTES >= body.length;
    out.push({
      [side]: {
        response: { body_mutation: { streamed_response: { body: chunk, end_of_stream: eos && last } } },
      },
    });
  }
  return out;
}

/** The answer to a message's trailers (`TrailersResponse`): passed on unchanged. */
export function trailersAnswer(side: 'request_trailers' | 'response_trailers'): ProcessingResponse {
  return { [side]: {} };
}

/** The answer to the response headers: unchanged, but for the conformance echo of the served endpoint. */
export function responseHeaders(echo: Readonly<Record<string, string>>): ProcessingResponse {
  return {
    response_headers: { response: Object.keys(echo).length === 0 ? {} : { header_mutation: setHeaders(echo) } },
  };
}

/** An HTTP answer the data plane sends the client instead of forwarding (503 none eligible, 429 shed, 4xx input). */
export function immediate(status: number, body: string, details: string): ProcessingResponse {
  return {
    immediate_response: {
      status: { code: status },
      headers: setHeaders({ 'content-type': 'application/json' }),
      body: Buffer.from(body),
      details,
    },
  };
}
