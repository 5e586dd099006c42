/**
 * `anthropic_inline_system: auto`: the probe keeps inline system messages in place only where the chat template
 * renders them as turns of their own, and folds them otherwise, naming why. Templates written for the test, each
 * failing one of the probe's conditions, rendered with the demo model's (Qwen3) tokenizer, whose `<|im_start|>` and
 * `<|im_end|>` are special tokens; and the demo model's own template and the fallback tokenizer.
 */
import { describe, expect, it } from 'vitest';
import { chatTemplateKwargsOf, probeInlineSystem, type InlineSystemRenderer } from '../../src/common/index.js';
import {
  ChatTemplate,
  demoTokenizerFiles,
  fallbackTokenizer,
  inlineSystemRendererOf,
  loadTokenizer,
  type ChatMessage,
} from '../../src/tokenizer/index.js';

const demo = loadTokenizer(demoTokenizerFiles());

/** The demo tokenizer (its encoding and special tokens, as the gateway reads them) under another chat template. */
function withTemplate(source: string): InlineSystemRenderer {
  const template = new ChatTemplate(source);
  return {
    ...inlineSystemRendererOf(demo),
    render: (messages, tools, effort) =>
      template.render(messages as unknown as ChatMessage[], {
        tools,
        extra: chatTemplateKwargsOf({ reasoning_effort: effort }),
      }),
  };
}

const turn = (role: string): string => `<|im_start|>${role}\\n{{ m.content or '' }}<|im_end|>\\n`;
const GENERATION = '{% if add_generation_prompt %}<|im_start|>assistant\\n{% endif %}';
const each = (body: string): string => `{% for m in messages %}${body}{% endfor %}${GENERATION}`;

describe('the inline-system probe', () => {
  it("keeps them in place under a template that marks every message's role", async () => {
    expect(await probeInlineSystem(withTemplate(each(turn('{{ m.role }}'))))).toEqual({
      mode: 'preserve',
      reason: 'the chat template renders them as system turns of their own',
    });
    expect((await probeInlineSystem(inlineSystemRendererOf(demo))).mode).toBe('preserve');
  });

  it.each([
    [
      'refuses',
      each(
        "{% if m.role == 'system' and not loop.first %}{{ raise_exception('System messages go first.') }}{% endif %}" +
          turn('{{ m.role }}'),
      ),
      'between turns: the template refuses it',
    ],
    ['drops', each(`{% if m.role != 'system' or loop.first %}${turn('{{ m.role }}')}{% endif %}`), 'drops it'],
    [
      'hoists',
      "{% set ns = namespace(s='') %}{% for m in messages %}{% if m.role == 'system' %}{% set ns.s = ns.s + m.content %}" +
        '{% endif %}{% endfor %}<|im_start|>system\\n{{ ns.s }}<|im_end|>\\n' +
        each(`{% if m.role != 'system' %}${turn('{{ m.role }}')}{% endif %}`),
      'between turns: it has no role marker',
    ],
    [
      'counts the messages',
      `<|im_start|>system\n{{ messages | length }} messages<|im_end|>\n${each(turn('{{ m.role }}'))}`,
      'between turns: rendering it changes other parts of the prompt',
    ],
    [
      'renders as a user',
      each(turn("{{ 'user' if m.role == 'system' and not loop.first else m.role }}")),
      'between turns: it renders as a user message would',
    ],
    [
      'marks no role',
      each(
        "{% if m.role == 'system' and not loop.first %}{{ m.content }}{% else %}" +
          turn('{{ m.role }}') +
          '{% endif %}',
      ),
      'it has no role marker',
    ],
  ])('folds them under a template that %s', async (_name, source, reason) => {
    const verdict = await probeInlineSystem(withTemplate(source));
    expect(verdict.mode).toBe('fold');
    expect(verdict.reason).toContain(reason);
  });

  it('folds them where no probe conversation renders, and under a tokenizer without special tokens', async () => {
    const none = await probeInlineSystem(withTemplate("{{ raise_exception('no chats here') }}"));
    expect(none).toEqual({ mode: 'fold', reason: 'the probe conversations could not be rendered' });
    expect((await probeInlineSystem(inlineSystemRendererOf(fallbackTokenizer()))).mode).toBe('fold');
  });
});
