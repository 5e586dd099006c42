/**
 * A model's tokenizer as the inline-system probe reads it (common's `InlineSystemRenderer`): the chat render with a
 * reasoning effort passed as vLLM passes it (common's `chatTemplateKwargsOf`), the encoding of a rendered chat (no
 * special tokens added: the template writes them), and the ids of the special and added tokens.
 */
import { chatTemplateKwargsOf, type InlineSystemRenderer } from '../common/index.js';
import type { ChatMessage, TextTokenizer } from './types.js';

export function inlineSystemRendererOf(tok: TextTokenizer): InlineSystemRenderer {
  return {
    render: (messages, tools, reasoningEffort) =>
      tok.renderChat(messages as unknown as ChatMessage[], {
        tools,
        extra: chatTemplateKwargsOf({ reasoning_effort: reasoningEffort }),
      }),
    encode: (text) => tok.encode(text, { addSpecialTokens: false }),
    decode: (ids) => tok.decode(ids),
    specialIds: tok.specialIds(),
  };
}
