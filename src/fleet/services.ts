/**
 * What the gateway hands the fleet for each model besides its config: where
 * the model's router, checks and discovery log and count, and how the gateway
 * tokenizes a chat (the tokenizer agreement probe compares it with the
 * engine's).
 */
import type { Logger } from 'pino';
import type { KvgateMetrics } from '../metrics/index.js';

/** What the gateway hands the fleet for each model's router besides its config. */
export interface ModelServices {
  /** The gateway's metrics (its registry is what /metrics serves). */
  readonly metrics: KvgateMetrics;
  /**
   * The model's logger: bound to the model once, so each line carries `model` exactly once. Code logging through it
   * (routing, discovery, the fleet) never adds `model` to a line's fields: pino would write the key twice.
   */
  readonly logger: Logger;
  /**
   * The model's token ids of a chat, exactly as the gateway preprocesses a chat request (its chat
   * template and tokenizer, no special tokens added): what the tokenizer agreement probe compares.
   */
  readonly tokenizeChat: (
    messages: readonly { readonly role: string; readonly content: string }[],
  ) => Promise<Uint32Array>;
}
