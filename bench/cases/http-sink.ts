/**
 * Child process of the hot-aggregate case: a local HTTP sink that answers every POST with 200 at
 * once, in a process of its own so that neither side of the comparison runs it on its event loop.
 * It checks order as it goes: per aggregate, each envelope's sequence must be above the last one
 * received. `GET /stats` returns `{"received": n, "outOfOrder": n}` and resets both. Prints
 * `{"port": n}` when listening.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

let received = 0;
let outOfOrder = 0;
let last = new Map<string, number>();

const server = createServer((request, response) => {
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
    const { aggregateId, sequence } = JSON.parse(Buffer.concat(chunks).toString()) as {
      aggregateId: string;
      sequence: number;
    };
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
