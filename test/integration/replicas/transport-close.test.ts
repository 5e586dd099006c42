/**
 * `NatsTransport.close` leaves no socket open, whatever the client was doing: here, reconnecting to a NATS server
 * that went silent (paused with SIGSTOP: its kernel still accepts the TCP connection, the server never greets it).
 * The client's own close ends only a connection that finished its handshake, and the attempt's socket kept the
 * process alive after shutdown until the server answered again. The first connection to a silent server the same: its
 * attempts time out and are tried again, none leaving its socket open, and closing ends the one in progress.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import { afterEach, describe, expect, it } from 'vitest';
import { NatsTransport } from '../../../src/replicas/index.js';
import { startNatsServer } from '../../helpers/nats-server.js';
import { until } from '../../helpers/until.js';

/** The TCP sockets this process holds open (the test's transport is the only TCP user of a test worker). */
const tcpSockets = (): number => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap').length;

describe('replica sync: closing the NATS transport', () => {
  const cleanups: (() => Promise<void> | void)[] = [];
  afterEach(async () => {
    for (const c of cleanups.splice(0).reverse()) await c();
  });

  it('while it reconnects to a silent server closes the attempt socket too', async () => {
    const nats = await startNatsServer();
    cleanups.push(() => nats.stop());
    const before = tcpSockets();
    const transport = new NatsTransport([nats.url], 'transport-close', {
      pingIntervalMs: 100,
      maxPingsOut: 1,
      reconnectTimeWaitMs: 50,
    });
    cleanups.push(async () => void (await transport.close()));
    await transport.ready();
    expect(tcpSockets()).toBe(before + 1);

    nats.pause();
    cleanups.push(() => nats.resume()); // first: stopping a paused server would wait
    await until(() => !transport.connected, 'the connection taken as lost', 3000);
    // The reconnect attempt: connected at TCP level (the kernel accepted it), waiting for the server's INFO.
    await until(() => tcpSockets() === before + 1, "the client's reconnect attempt", 3000);

    expect(await transport.close()).toBe(true);
    // Destroyed sockets leave the list once their handles closed, a turn of the event loop later.
    await until(() => tcpSockets() === before, 'no socket left', 3000);
  });

  /** Counts the TCP connections this process opens from now on (Node names each on this channel). */
  function countConnections(): () => number {
    let n = 0;
    const count = (): void => void n++;
    diagnosticsChannel.subscribe('net.client.socket', count);
    cleanups.push(() => void diagnosticsChannel.unsubscribe('net.client.socket', count));
    return () => n;
  }

  it('a first connect to a silent server is tried again, no timed-out attempt left open; it connects once it answers', async () => {
    const nats = await startNatsServer();
    cleanups.push(() => nats.stop());
    nats.pause();
    cleanups.push(() => nats.resume()); // first: stopping a paused server would wait
    const before = tcpSockets();
    const connections = countConnections();
    const statuses: string[] = [];
    const transport = new NatsTransport([nats.url], 'first-connect', { connectTimeoutMs: 200 });
    transport.onStatus = (status, detail) => void statuses.push(`${status}: ${detail}`);
    cleanups.push(async () => void (await transport.close()));

    // Before, the first timeout ended the retries: one attempt, its socket left open, the bus never up.
    await until(() => connections() >= 4, 'four attempts', 5000);
    // Closed sockets leave the list a turn of the event loop after their handles closed: the last attempt's
    // predecessor was closed 250 ms before it started.
    expect(tcpSockets()).toBeLessThanOrEqual(before + 1);
    expect(statuses).toEqual(['disconnected: cannot connect yet, retrying: timeout']);

    nats.resume();
    await transport.ready();
    expect(transport.connected).toBe(true);
    expect(statuses.at(-1)).toMatch(/^connected: connected to /);
    await until(() => tcpSockets() === before + 1, 'the connection alone', 3000);
  });

  it('while its first connect waits on a silent server closes the attempt socket', async () => {
    const nats = await startNatsServer();
    cleanups.push(() => nats.stop());
    nats.pause();
    cleanups.push(() => nats.resume());
    const before = tcpSockets();
    // Its timeout far beyond the test's: the attempt ends only if closing ends it.
    const transport = new NatsTransport([nats.url], 'first-connect-close', { connectTimeoutMs: 60_000 });
    await until(() => tcpSockets() === before + 1, 'the first attempt', 3000);

    expect(await transport.close()).toBe(true);
    await until(() => tcpSockets() === before, 'no socket left', 3000);
  });
});
