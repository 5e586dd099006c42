/**
 * `NatsTransport.close` leaves no socket open, whatever the client was doing: here, reconnecting to a NATS server
 * that went silent (paused with SIGSTOP: its kernel still accepts the TCP connection, the server never greets it).
 * The client's own close ends only a connection that finished its handshake, and the attempt's socket kept the
 * process alive after shutdown until the server answered again.
 */
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
});
