/**
 * Child process of the hot-aggregate case: a local HTTP sink that answers every POST with 200 at
 * once, in a process of its own so that neither side of the comparison runs it on its event loop.
 * It checks order as it goes: per aggregate, each envelope's sequence must be above the last one
 * received. `GET /stats` returns `{"received": n, "outOfOrder": n}` and resets both. Prints
 * `{"port": n}` when listening. For the fair-share case, an envelope whose payload has a
 * `trickle` number is also noted with its arrival time (`Date.now()`, the same clock as the
 * bench's on this machine): `GET /trickle` returns `{"received": n, "arrivals": [[trickle, ms]]}`
 * and resets nothing.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

let received = 0;
let outOfOrder = 0;
let last = new Map<string, number>();
let total = 0;
const arrivals: [number, number][] = [];

const server = createServer((request, response) => {
  if (request.method === 'GET' && request.url === '/trickle') {
    response.end(JSON.stringify({ received: total, arrivals }));
    return;
  }
  if (request.method === 'GET') {
    response.end(JSON.stringify({ received, outOfOrder }));
    received = 0;
    outOfOrder = 0;
    last = new Map();
    return;
  }
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    const { aggregateId, sequence, payload } = JSON.parse(Buffer.concat(chunks).toString()) as {
      aggregateId: string;
      sequence: number;
      payload: { trickle?: number } | null;
    };
    if (typeof payload?.trickle === 'number') arrivals.push([payload.trickle, Date.now()]);
    total++;
    if (sequence <= (last.get(aggregateId) ?? 0)) outOfOrder++;
    last.set(aggregateId, sequence);
    received++;
    response.end();
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => {
  process.stdout.write(`${JSON.stringify({ port: (server.address() as AddressInfo).port })}\n`);
});
