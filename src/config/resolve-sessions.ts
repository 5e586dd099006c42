/**
 * A model's session keys: `session_priority` (each session's start sent as the engines' `priority`) and
 * `session_affinity` (whether a session's binding pins its requests; `cost`, the KV cost model's placement, needs
 * KV mode, and is its default); and `client_pins` (whether a client may name the worker a session or request goes to).
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

/** `client_pins`: whether clients may name the model's workers (`deny` cannot serve direct mode, where they must). */
export function readClientPins(m: ConfigReader, routerMode: RouterMode): ModelConfig['clientPins'] {
  const pins = m.oneOf('client_pins', ['allow', 'deny'] as const, 'allow');
  if (pins === 'deny' && routerMode === 'direct') m.problem('client_pins', 'deny cannot serve router_mode direct');
  return pins;
}
