import net from 'node:net';

/**
 * A TCP forwarder in front of a real broker, to take the broker "down" and bring it "back" without
 * touching the shared server (pg-boss's test/halfOpenProxy idea): `stop()` cuts every connection
 * and stops listening (clients see a reset, then connection refused), `start()` listens again on
 * the same port.
 */
export interface TcpProxy {
  readonly port: number;
  stop(): Promise<void>;
  start(): Promise<void>;
}

export async function startTcpProxy(
  targetPort: number,
  targetHost = '127.0.0.1',
): Promise<TcpProxy> {
  const sockets = new Set<net.Socket>();
  let server: net.Server | undefined;
  let port = 0;

  const listen = async (): Promise<void> => {
    server = net.createServer((client) => {
      const upstream = net.connect({ host: targetHost, port: targetPort });
      for (const socket of [client, upstream]) {
        sockets.add(socket);
        socket.on('close', () => sockets.delete(socket));
        socket.on('error', () => undefined);
      }
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
      client.pipe(upstream);
      upstream.pipe(client);
    });
    await new Promise<void>((resolve, reject) => {
      server!.once('error', reject);
      server!.listen(port, '127.0.0.1', () => resolve());
    });
    port = (server.address() as net.AddressInfo).port;
  };

  await listen();
  return {
    get port() {
      return port;
    },
    async stop() {
      const closing = server;
      server = undefined;
      for (const socket of sockets) socket.resetAndDestroy();
      if (closing) await new Promise<void>((resolve) => closing.close(() => resolve()));
    },
    start: listen,
  };
}
