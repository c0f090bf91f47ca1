import { createConnection } from 'node:net';

/**
 * Whether a broker answers on 127.0.0.1:`port`. When it does not: locally the test file is
 * skipped with a printed reason; under `CI=true` this throws, because CI starts every service
 * and a silent skip there would hide a broken binding.
 */
export async function brokerAvailable(
  name: string,
  port: number,
  host = '127.0.0.1',
): Promise<boolean> {
  const up = await new Promise<boolean>((resolve) => {
    const socket = createConnection({ host, port });
    socket.setTimeout(2_000);
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(false));
  });
  if (up) return true;
  const reason = `${name} is not reachable on ${host}:${port}`;
  if (process.env.CI === 'true')
    throw new Error(`${reason} (CI=true: every broker must be running)`);
  console.warn(`[consumer tests] skipping ${name} binding tests: ${reason}`);
  return false;
}
