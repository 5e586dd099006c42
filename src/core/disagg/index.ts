/** Pure pieces of disaggregated serving: SGLang bootstrap rooms and the per-request tracker with phases. */
export { computeBootstrapRoom, randomRoomSeed, I64_MAX } from './bootstrap-room.js';
export { RequestTracker } from './request-tracker.js';
export {
  ALWAYS_DISAGGREGATE,
  DISAGG_POLICY_MODES,
  decideDisagg,
  type DisaggDecision,
  type DisaggPolicy,
} from './disagg-policy.js';
