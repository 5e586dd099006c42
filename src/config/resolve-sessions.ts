/**
 * A model's session keys: `session_priority` (each session's start sent as the engines' `priority`) and
 * `session_affinity` (whether a session's binding pins its requests; `cost`, the KV cost model's placement, needs
 * KV mode, and is its default).
 */
import { defaultSessionAffinity, type RouterMode } from '../common/index.js';
import type { ConfigReader } from './reader.js';
import type { ModelConfig } from './types.js';

export function readSessionKeys(
  m: ConfigReader,
  routerMode: RouterMode,
): Pick<ModelConfig, 'sessionPriority' | 'sessionAffinity'> {
  const priority = m.oneOf('session_priority', ['off', 'lower_first', 'higher_first'] as const, 'off');
  const affinity = m.oneOf('session_affinity', ['pin', 'cost'] as const, defaultSessionAffinity(routerMode));
  if (affinity === 'cost' && routerMode !== 'kv') m.problem('session_affinity', 'cost needs router_mode kv');
  return { sessionPriority: priority === 'off' ? undefined : priority, sessionAffinity: affinity };
}
