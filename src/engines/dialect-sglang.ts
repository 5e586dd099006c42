/**
 * SGLang's disaggregated prefill/decode rendezvous (bootstrap, simultaneous
 * dispatch), as SGLang's router and engines speak it.
 *
 * Both legs carry the same triple: `bootstrap_host` / `bootstrap_port` (the
 * prefill server's bootstrap service) and `bootstrap_room` (a 63-bit id that
 * pairs the two halves; the decode side reads the prefill DP rank as
 * `room % prefill_dp_size`, see computeBootstrapRoom in src/core). The prefill
 * leg is cut to one non-streaming token; the decode leg is the client's body
 * plus the triple. The room is kept exact as a bigint and written as a JSON
 * integer by `serializeBody`. Pinned by test/engines/dialects.test.ts.
 */
import { KvgateError } from '../errors/index.js';
import { checkRank, oneTokenPrefillFields, type LegFields } from './leg-fields.js';

export interface BootstrapInfo {
  /** Host name or address of the prefill server's bootstrap service. */
  host: string;
  /** Its port (SGLang's `--disaggregation-bootstrap-port`, default 8998). */
  port: number;
  /** Pairing id in [0, 2^63 - 1]. */
  room: bigint | number;
}

const I64_MAX = (1n << 63n) - 1n;

/**
 * The triple as request fields.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT for an empty host, a port outside 1..65535, or a room outside [0, 2^63 - 1].
 */
export function bootstrapFields(info: BootstrapInfo): Record<string, unknown> {
  if (typeof info.host !== 'string' || info.host.length === 0) {
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', 'bootstrap host must be a non-empty string', { host: info.host });
  }
  if (!Number.isInteger(info.port) || info.port < 1 || info.port > 65535) {
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `bootstrap port must be in 1..65535, got ${String(info.port)}`, {
      port: info.port,
    });
  }
  let room: bigint;
  if (typeof info.room === 'bigint') room = info.room;
  else if (Number.isSafeInteger(info.room)) room = BigInt(info.room);
  else
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `bootstrap room must be an integer, got ${String(info.room)}`, {
      room: String(info.room),
    });
  if (room < 0n || room > I64_MAX) {
    throw new KvgateError('KVG_ERR_INVALID_ARGUMENT', `bootstrap room must be in [0, 2^63 - 1], got ${room}`, {
      room: room.toString(),
    });
  }
  return { bootstrap_host: info.host, bootstrap_port: info.port, bootstrap_room: room };
}

/**
 * The prefill leg: one non-streaming token plus the triple.
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT (see `bootstrapFields`).
 */
export function sglangPrefillLegFields(
  body: Readonly<Record<string, unknown>>,
  options: { bootstrap: BootstrapInfo },
): LegFields {
  return { fields: { ...oneTokenPrefillFields(body), ...bootstrapFields(options.bootstrap) }, headers: {} };
}

/**
 * The decode leg: the client's body (its own `max_tokens`, streaming allowed) plus the same triple.
 * `prefillDpRank`, when given, is sent as `disagg_prefill_dp_rank` (newer SGLang builds use it when the
 * prefill and decode DP sizes differ; older ones ignore it and rely on the room).
 * @throws KvgateError KVG_ERR_INVALID_ARGUMENT (see `bootstrapFields`; a negative or fractional rank).
 */
export function sglangDecodeLegFields(options: { bootstrap: BootstrapInfo; prefillDpRank?: number }): LegFields {
  const fields = bootstrapFields(options.bootstrap);
  if (options.prefillDpRank !== undefined) {
    checkRank(options.prefillDpRank, 'prefillDpRank');
    fields['disagg_prefill_dp_rank'] = options.prefillDpRank;
  }
  return { fields, headers: {} };
}
