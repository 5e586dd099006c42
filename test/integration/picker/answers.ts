/**
 * The answers `kvgate picker` sends, as the test's Envoy (a client built from
 * the vendored protos, oneofs named by their `response` member) decodes them.
 */

/** The answer to the request headers once picked: the header and the `envoy.lb` metadata carry the same list. */
export function picked(list: string): Record<string, unknown> {
  return {
    response: 'request_headers',
    request_headers: {
      response: {
        clear_route_cache: true,
        header_mutation: {
          set_headers: [{ header: { key: 'x-gateway-destination-endpoint', raw_value: Buffer.from(list) } }],
        },
      },
    },
    dynamic_metadata: {
      fields: {
        'envoy.lb': {
          kind: 'structValue',
          structValue: { fields: { 'x-gateway-destination-endpoint': { kind: 'stringValue', stringValue: list } } },
        },
      },
    },
  };
}

/** The request body passed on unchanged, in one streamed chunk that ends it (unless trailers follow). */
export const bodyBack = (body: Buffer, side = 'request_body', eos = true): Record<string, unknown> => ({
  response: side,
  [side]: {
    response: { body_mutation: { mutation: 'streamed_response', streamed_response: { body, end_of_stream: eos } } },
  },
});

const STATUS_NAMES: Record<number, string> = {
  400: 'BadRequest',
  413: 'PayloadTooLarge',
  429: 'TooManyRequests',
  500: 'InternalServerError',
  503: 'ServiceUnavailable',
};

const TYPES: Record<number, string> = {
  429: 'rate_limit_error',
  500: 'server_error',
  503: 'service_unavailable',
};

export function immediate(
  status: number,
  code: string,
  message: string,
  param: string | null = null,
): Record<string, unknown> {
  const type = TYPES[status] ?? 'invalid_request_error';
  return {
    response: 'immediate_response',
    immediate_response: {
      status: { code: STATUS_NAMES[status] },
      headers: { set_headers: [{ header: { key: 'content-type', raw_value: Buffer.from('application/json') } }] },
      body: Buffer.from(JSON.stringify({ error: { message, type, param, code } })),
      details: code,
    },
  };
}
