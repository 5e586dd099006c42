/**
 * A chat completion's template variables as vLLM's `build_chat_params` gives them to the chat template: the
 * request's `chat_template_kwargs`, then its `reasoning_effort` (when set) as `reasoning_effort` and, unless the
 * request's kwargs set it, `enable_thinking` (false for `none`: templates such as Gemma 4's think only when asked).
 * The gateway routes on these, and the mocker renders with them, so both compute the engine's tokens. The agent APIs
 * follow the same rule with their own effort field: a Messages request's `output_config.effort` (vLLM sets the chat
 * request's `reasoning_effort` from it) and a Responses request's `reasoning.effort` (messages-convert.ts,
 * responses-convert.ts).
 */
export function chatTemplateKwargsOf(body: Readonly<Record<string, unknown>>): Record<string, unknown> | undefined {
  const own = (body.chat_template_kwargs ?? undefined) as Record<string, unknown> | undefined;
  const effort = body.reasoning_effort;
  if (effort === undefined || effort === null) return own;
  return {
    ...own,
    reasoning_effort: effort,
    ...(own !== undefined && 'enable_thinking' in own ? {} : { enable_thinking: effort !== 'none' }),
  };
}
