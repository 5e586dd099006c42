/** kvgate's errors in Anthropic's shape on `/v1/messages`: the `error.type` Anthropic documents for each status. */
import { describe, expect, it } from 'vitest';
import { KvgateError, type KvgateErrorCode } from '../../src/errors/index.js';
import { anthropicErrorFrame } from '../../src/frontend/anthropic-error.js';

function typeOf(code: KvgateErrorCode): unknown {
  const frame = anthropicErrorFrame(new KvgateError(code, 'x'), 'req-1').toString();
  return (JSON.parse(/^data: (.*)$/m.exec(frame)![1]!) as { error: { type: string } }).error.type;
}

describe("Anthropic's error types", () => {
  it('maps each status to its documented type: 504 is timeout_error', () => {
    expect(typeOf('KVG_ERR_INVALID_REQUEST')).toBe('invalid_request_error');
    expect(typeOf('KVG_ERR_TOO_MANY_REQUESTS')).toBe('rate_limit_error');
    expect(typeOf('KVG_ERR_OVERLOADED')).toBe('overloaded_error');
    expect(typeOf('KVG_ERR_REQUEST_TIMEOUT')).toBe('timeout_error');
    expect(typeOf('KVG_ERR_ENGINE_FAILED')).toBe('api_error');
  });
});
