/** The gateway server's route table entries and connection rules (see server.ts). */
import type { KvgateErrorCode } from '../errors/index.js';
import type { RequestContext } from './respond.js';

export type Listener = 'public' | 'admin';

/** Answers after which the connection is closed: its request may not have been read to the end, or the client misbehaves. */
export const CLOSING_CODES = new Set<KvgateErrorCode>([
  'KVG_ERR_BODY_TOO_LARGE',
  'KVG_ERR_CLIENT_TIMEOUT',
  'KVG_ERR_TOO_MANY_CONNECTIONS',
  'KVG_ERR_UNSUPPORTED_ENCODING',
]);
/** `body`: the request body's bytes (Content-Encoding decoded), for routes that read one (`limited`); empty otherwise. */
type Handler = (ctx: RequestContext, body: Uint8Array) => Promise<void> | void;

export interface RouteSpec {
  /** Label for metrics and logs. */
  name: string;
  methods: Partial<Record<string, Handler>>;
  /** Needs an API key when keys are configured. */
  auth: boolean;
  /** Reads a body, then takes a concurrency slot (limit: max_concurrent_requests). */
  limited: boolean;
}
