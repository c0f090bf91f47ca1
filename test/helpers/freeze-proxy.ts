import net from 'node:net';

/**
 * A TCP forwarder that plays a network partition: `freeze()` stops forwarding on every open
 * connection and on every connection opened while frozen — bytes are dropped, nothing is closed,
 * no RST, as when a switch dies or a NAT forgets its mapping — and `heal()` lets NEW connections
 * through again while the frozen ones stay dead for good (after a real partition their peers
 * have moved on). Compare test/contract/tcp-proxy.ts, which resets connections instead.
 *
 * A FIN is forwarded only over a live link, and the proxy never answers one itself (half-open
 * sockets allowed): a client that ends a frozen connection gracefully (Terminate, half-close)
 * waits for the server's FIN as over a real partition, where it never comes. Node's default would
 * answer the client's FIN on the server's behalf at once, and hide that wait.
 *
 * What it cannot play: the kernel of this host still acknowledges what the client sends to the
 * proxy, TCP keepalive probes included, so only an application-level timeout (a query timeout,
 * a heartbeat) notices a frozen connection here. Over a real network keepalive notices it too.
 */
export interface FreezeProxy {
  readonly port: number;
  /** `url` with host and port replaced by the proxy's. */
  url(url: string): string;
  freeze(): void;
  heal(): void;
  /**
   * New connections go to `port` from now on (an endpoint moved to a promoted replica); open
   * ones stay where they are.
   */
  retarget(port: number): void;
  /** Connections accepted so far, and how many of them are frozen. */
  counts(): { accepted: number; frozen: number };
  /** Closes everything, frozen connections included (frees the server's backends). */
  close(): Promise<void>;
}

interface Link {
  client: net.Socket;
  upstream: net.Socket;
  frozen: boolean;
}

export async function startFreezeProxy(
  targetPort: number,
  targetHost = '127.0.0.1',
): Promise<FreezeProxy> {
  const links = new Set<Link>();
  let frozen = false;
  let accepted = 0;
  let target = targetPort;
  const server = net.createServer({ allowHalfOpen: true }, (client) => {
    accepted++;
    const upstream = net.connect({ host: targetHost, port: target, allowHalfOpen: true });
    const link: Link = { client, upstream, frozen };
    links.add(link);
    const forward = (from: net.Socket, to: net.Socket) => {
      from.on('data', (chunk) => {
        if (!link.frozen) to.write(chunk);
      });
      // A FIN or a close travels only over a live link: over a frozen one it is lost.
      from.on('end', () => {
        if (!link.frozen) to.end();
      });
      from.on('close', () => {
        if (!link.frozen) to.destroy();
      });
      from.on('error', () => undefined);
    };
    forward(client, upstream);
    forward(upstream, client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    url(url) {
      const parsed = new URL(url);
      parsed.hostname = '127.0.0.1';
      parsed.port = String(port);
      return parsed.toString();
    },
    freeze() {
      frozen = true;
      for (const link of links) link.frozen = true;
    },
    heal() {
      frozen = false;
    },
    retarget(next) {
      target = next;
    },
    counts: () => ({ accepted, frozen: [...links].filter((l) => l.frozen).length }),
    async close() {
      for (const link of links) {
        link.client.destroy();
        link.upstream.destroy();
      }
      links.clear();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
