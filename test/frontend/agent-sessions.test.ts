/** The sessions coding agents name in their own headers (Claude Code, Codex), read for requests that name none. */
import { describe, expect, it } from 'vitest';
import type { WorkerConfig } from '../../src/config/index.js';
import { agentSession } from '../../src/frontend/agent-sessions.js';
import { parseRoutingHints, routingHeadersOf } from '../../src/frontend/hints.js';

const workers = [{ id: 1 }] as unknown as WorkerConfig[];
const conversation = { 'x-claude-code-session-id': 'conv-1' };

describe('agentSession', () => {
  it("reads Claude Code's conversation, its subagents by agent id and their parents", () => {
    expect(agentSession(conversation)).toEqual({ id: 'conv-1' });
    // A top-level subagent: the conversation is its parent.
    expect(agentSession({ ...conversation, 'x-claude-code-agent-id': 'a1' })).toEqual({ id: 'a1', parentId: 'conv-1' });
    // A nested subagent: its immediate parent agent.
    expect(
      agentSession({ ...conversation, 'x-claude-code-agent-id': 'a2', 'x-claude-code-parent-agent-id': 'a1' }),
    ).toEqual({ id: 'a2', parentId: 'a1' });
    // A parent-agent header on a turn that is no subagent's is ignored.
    expect(agentSession({ ...conversation, 'x-claude-code-parent-agent-id': 'a1' })).toEqual({ id: 'conv-1' });
  });

  it("reads Codex's session-id, and its older session_id", () => {
    expect(agentSession({ 'session-id': 'codex-1' })).toEqual({ id: 'codex-1' });
    expect(agentSession({ session_id: 'codex-0' })).toEqual({ id: 'codex-0' });
    expect(agentSession({ 'user-agent': 'curl' })).toBeUndefined();
  });

  it('ignores values that are empty or too long: the request goes on without that session', () => {
    expect(agentSession({ 'x-claude-code-session-id': ' ' })).toBeUndefined();
    expect(agentSession({ 'session-id': 'x'.repeat(257) })).toBeUndefined();
    expect(agentSession({ ...conversation, 'x-claude-code-agent-id': '' })).toEqual({ id: 'conv-1' });
  });
});

describe('parseRoutingHints with agent headers', () => {
  it("takes the agent's session when the request names none the kvgate way, and never over one it names", () => {
    expect(parseRoutingHints(undefined, conversation, workers).hints.session).toEqual({ id: 'conv-1' });
    const named = { ...conversation, 'x-session-id': 'mine' };
    expect(parseRoutingHints(undefined, named, workers).hints.session).toEqual({ id: 'mine' });
    const nvext = { session_control: { session_id: 'nv' } };
    expect(parseRoutingHints(nvext, conversation, workers).hints.session).toMatchObject({ id: 'nv' });
    // Preprocessing threads get the agent headers with the routing headers.
    expect(routingHeadersOf({ ...conversation, 'session-id': 'c', 'user-agent': 'x' })).toEqual({
      ...conversation,
      'session-id': 'c',
    });
  });
});
