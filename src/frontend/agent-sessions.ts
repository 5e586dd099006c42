/**
 * The sessions coding agents name in headers of their own, for a request that
 * names none the kvgate (or Dynamo) way (`x-session-id`,
 * `nvext.session_control`). Claude Code sends `x-claude-code-session-id` on
 * every turn of a conversation, its subagents' too; a subagent's request adds
 * its own `x-claude-code-agent-id`, and a nested subagent's
 * `x-claude-code-parent-agent-id` names its immediate parent. Codex sends
 * `session-id` (older releases: `session_id`). So a Claude Code subagent is the
 * session of its agent id, its parent the parent agent or else the
 * conversation; a parent-agent header on a turn without an agent id is
 * ignored.
 *
 * These headers are the agents' protocol, not kvgate's: a value that is empty
 * or longer than 256 characters is ignored rather than refused, and the
 * request goes on without that session.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { SessionHint } from '../common/index.js';

/** The headers read here (all lowercase, as Node gives them). */
export const AGENT_SESSION_HEADERS = [
  'x-claude-code-session-id',
  'x-claude-code-agent-id',
  'x-claude-code-parent-agent-id',
  'session-id',
  'session_id',
] as const;

function value(headers: IncomingHttpHeaders, name: (typeof AGENT_SESSION_HEADERS)[number]): string | undefined {
  const v = headers[name];
  if (typeof v !== 'string') return undefined;
  const t = v.trim();
  return t.length > 0 && t.length <= 256 ? t : undefined;
}

/** The session a coding agent's headers name, or undefined. */
export function agentSession(headers: IncomingHttpHeaders): SessionHint | undefined {
  const conversation = value(headers, 'x-claude-code-session-id');
  const agent = value(headers, 'x-claude-code-agent-id');
  if (agent !== undefined) {
    const parent = value(headers, 'x-claude-code-parent-agent-id') ?? conversation;
    return parent === undefined || parent === agent ? { id: agent } : { id: agent, parentId: parent };
  }
  if (conversation !== undefined) return { id: conversation };
  const codex = value(headers, 'session-id') ?? value(headers, 'session_id');
  return codex === undefined ? undefined : { id: codex };
}
