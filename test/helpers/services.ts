import net from 'node:net';

/** Is `host:port` accepting TCP connections? Resolves within `timeoutMs`, never rejects. */
export function isReachable(host: string, port: number, timeoutMs = 1000): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host, port });
    const done = (ok: boolean): void => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

/**
 * Decides whether a suite that needs a real server runs. Reachable → true. Unreachable → false
 * with a printed reason, so the suite is SKIPPED on a laptop without the server; but under
 * `CI=true` it throws, so a CI run without the server FAILS instead of passing silently.
 *
 * @example
 * ```ts
 * const natsUp = await requireService('NATS', '127.0.0.1', 4222);
 * describe.runIf(natsUp)('NATS', () => { … });
 * ```
 */
export async function requireService(name: string, host: string, port: number): Promise<boolean> {
  if (await isReachable(host, port)) return true;
  const reason = `${name} is not reachable on ${host}:${port}`;
  if (process.env.CI === 'true') {
    throw new Error(`${reason}, and CI=true requires it (see DEPENDENCIES.md for start commands)`);
  }
  console.warn(`[agent-outbox tests] SKIPPING ${name} tests: ${reason}`);
  return false;
}

/** A TCP port on 127.0.0.1 with nothing listening on it (bound, then released). */
export async function closedPort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
