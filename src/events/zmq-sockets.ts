/**
 * Room for every subscription a fleet needs. ZMQ's context holds 1,023 sockets by default, and zeromq's
 * context is one for the whole process (its threads share it): a gateway subscribed to more (worker, dp rank)
 * publishers than that was refused its 1,024th socket ("Too many open file descriptors"), on the main thread
 * and on the ingestion threads alike (where the refusal escaped the thread's handler).
 *
 * Raised when this module is first evaluated, before any socket exists: libzmq sizes the context's socket
 * table when its first socket is created, and a later setting does nothing. Every module that creates a
 * socket of the events layer imports this one. What bounds the sockets then is the process's limit on open
 * files (a socket and each of its connections take one): operators running thousands of ranks raise it
 * (`ulimit -n`, `LimitNOFILE`), and Node raises the soft limit to the hard one at start.
 */
import { context } from 'zeromq';

/** Sockets the process may hold: three per (worker, dp rank) slot (the SUB and its monitor's pair), 21,000 slots and more. */
const MAX_SOCKETS = 65_536;

if (context.maxSockets < MAX_SOCKETS) context.maxSockets = MAX_SOCKETS;
