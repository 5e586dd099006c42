/**
 * Active-active router replicas: each replica's in-flight bookings and sticky
 * sessions reach the others over a message bus (NATS, or the IPC channel of a
 * `kvgate serve --processes N` cluster), so every replica's cost model sees the
 * load all of them put on each worker.
 */
export { ReplicaSync } from './replica-sync.js';
export { channelKey } from './protocol.js';
export { warmStartModel } from './warm-start.js';
export { NatsTransport } from './transport.js';
export { IpcTransport, relaySyncMessages } from './ipc-transport.js';
