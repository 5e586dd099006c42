/**
 * The endpoint picker: kvgate's KV-aware choice served to a Gateway API
 * Inference Extension data plane over Envoy's external-processing protocol.
 */
export { startPicker } from './start.js';
export type { RunningPicker } from './start.js';
