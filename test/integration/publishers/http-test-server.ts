import http from 'node:http';
import type { AddressInfo } from 'node:net';

/** A request the test webhook received. */
export interface ReceivedRequest {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A local webhook receiver: records every request, answers with `respond` (default 200). */
export interface TestWebhook {
  baseUrl: string;
  requests: ReceivedRequest[];
  /** Called after recording each request; set per test. */
  onRequest: (request: ReceivedRequest, response: http.ServerResponse) => void;
  close(): Promise<void>;
}

export async function startTestWebhook(): Promise<TestWebhook> {
  const webhook: TestWebhook = {
    baseUrl: '',
    requests: [],
    onRequest: (_request, response) => response.writeHead(200).end('ok'),
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const request: ReceivedRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
      };
      webhook.requests.push(request);
      webhook.onRequest(request, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  webhook.baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return webhook;
}
