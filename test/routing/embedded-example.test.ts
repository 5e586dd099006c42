import { describe, expect, it } from 'vitest';
import { main } from '../../examples/embedded-router/main.js';

describe('examples/embedded-router', () => {
  it('routes cached chats to the worker holding the system prompt, explains each decision, and frees everything', () => {
    const lines: string[] = [];
    const decisions = main((l) => lines.push(l));
    const byId = Object.fromEntries(decisions.map((d) => [d.requestId, d]));
    expect(byId['chat-1']).toMatchObject({ workerId: 102, overlapBlocks: 32, booked: true });
    expect(byId['chat-2']).toMatchObject({ workerId: 102, overlapBlocks: 32 });
    expect(byId.other!.workerId).not.toBe(102);
    expect(byId.peek).toMatchObject({ workerId: 102, booked: false });
    expect(lines).toContain('after free: 101:0 102:0 103:0');
    expect(lines.filter((l) => l.startsWith('  worker ')).length).toBe(9);
  });
});
