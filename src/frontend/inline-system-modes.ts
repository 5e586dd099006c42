/**
 * Each served model's placement of a Messages request's system messages inside `messages` (common's
 * inline-system.ts): its `anthropic_inline_system`, with `auto` settled once at start by probing its chat template
 * as vLLM settles its own `auto` (common's inline-system-probe.ts, through the preprocessor), and logged with why.
 * The gateway serves each model's config with the mode in place of `auto`.
 */
import type { InlineSystemMode, Logger } from '../common/index.js';
import type { ModelConfig } from '../config/index.js';
import type { Preprocessor } from './preprocess/preprocessor.js';

/** A model's config as the gateway serves it: its inline-system placement settled. */
export type ServedModelConfig = ModelConfig & { readonly anthropicInlineSystem: InlineSystemMode };

/** The settled placement of each of `models` (a model without a tokenizer of its own, which renders nothing: preserve). */
export async function settleInlineSystem(
  models: readonly ModelConfig[],
  preprocessor: Pick<Preprocessor, 'inlineSystem'>,
  logger: Logger,
): Promise<ReadonlyMap<string, InlineSystemMode>> {
  const modes = new Map<string, InlineSystemMode>();
  for (const m of models) {
    if (m.anthropicInlineSystem !== 'auto') {
      modes.set(m.name, m.anthropicInlineSystem);
      continue;
    }
    const verdict = await preprocessor.inlineSystem(m.name);
    modes.set(m.name, verdict?.mode ?? 'preserve');
    if (verdict === undefined) continue;
    logger.info(
      { model: m.name, anthropicInlineSystem: verdict.mode, reason: verdict.reason },
      verdict.mode === 'preserve'
        ? 'Messages requests: system messages inside messages are kept as system turns'
        : 'Messages requests: system messages inside messages are folded into user turns',
    );
  }
  return modes;
}

/** `m` with its settled placement in place of `auto` (preserve where none was settled). */
export function servedModelConfig<M extends ModelConfig>(
  m: M,
  modes?: ReadonlyMap<string, InlineSystemMode>,
): M & ServedModelConfig {
  if (m.anthropicInlineSystem !== 'auto') return m as M & ServedModelConfig;
  return { ...m, anthropicInlineSystem: modes?.get(m.name) ?? 'preserve' };
}
