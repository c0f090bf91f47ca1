import { engineFor } from '../admin/database-engine.js';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { approveMessages, OutboxApprovalError, rejectMessages } from '../admin/approvals.js';
import { decideCallApproval, isCallApprovalRef } from '../admin/call-approvals.js';
import { replayDeadLetters } from '../admin/dead-letters.js';
import { OutboxError, OutboxValidationError } from '../core/errors.js';
import { DEFAULT_SCHEMA, quoteIdentifier } from '../core/identifier.js';
import type { DeadLetterPolicy } from '../dispatcher/options.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { isLoopbackHost, presentedToken, refuseCrossSite, tokenMatches } from './access.js';
import { DASHBOARD_CSP, DASHBOARD_HTML } from './page.js';
import { replayLaneDeadLetters, skipLaneDeadLetters } from '../lanes/lane-admin.js';
import { LaneDashboardSampler } from './lane-sampler.js';
import { readLaneDashboardState } from './lane-state.js';
import { DashboardSampler } from './sampler.js';
import { readDashboardState } from './state.js';

/** Options of {@link startDashboard}. */
export interface DashboardOptions {
  /** Runs the dashboard's queries. A pool (every statement stands alone). */
  executor: SqlExecutor;
  /** Schema of the outbox tables. Default `public`. */
  schema?: string;
  /**
   * Which engine's messages to show (default: the one the schema records, `readDatabaseEngine`,
   * read at the start): `claims` (`createOutbox({ engine: 'claims' })`, `createDispatcher`) or
   * `lanes` (`createOutbox({ engine: 'lanes' })`, `createLaneDispatcher`). On lanes the published
   * rate and the latency come from the lane cursors (the latency is an upper bound), replay takes
   * message ids, and a dead letter that holds its aggregate can be skipped (`POST /api/skip`,
   * lanes only: the aggregate's later messages go on).
   */
  engine?: 'claims' | 'lanes';
  /** TCP port; 0 picks a free one. Default 8080. */
  port?: number;
  /** Interface to bind. Default `127.0.0.1`. Any other address needs a `token`. */
  host?: string;
  /**
   * Required by every `/api` request as `Authorization: Bearer <token>` when set. Mandatory when
   * `host` is not a loopback address: the page can replay dead letters.
   */
  token?: string;
  /** Backlog/rate sampling interval in ms. Default 5 000. */
  sampleIntervalMs?: number;
  /**
   * What a message rejected from the page does to the later messages of its aggregate: `hold`
   * (default) or `skip` — use your dispatchers' `deadLetterPolicy` (see `rejectMessages`).
   */
  deadLetterPolicy?: DeadLetterPolicy;
}

/** A running dashboard. */
export interface Dashboard {
  /** `http://host:port/` */
  readonly url: string;
  readonly port: number;
  /** Takes a backlog/rate sample now (tests, or to refresh before a screenshot). */
  sample(): Promise<void>;
  close(): Promise<void>;
}

const MAX_BODY_BYTES = 64 * 1024;

/**
 * Serves the dashboard (SPEC §4.13): `GET /` the page, `GET /api/state` its data,
 * `POST /api/replay` `{ "ids": ["42"] }` to replay dead letters, and for held messages (issue 20)
 * `POST /api/approve` `{ "ids": ["42"], "by": "alice", "note"?: "..." }` and `POST /api/reject`
 * `{ "ids": ["42"], "by": "alice", "reason": "..." }` (a reason is required; deciding twice is a
 * 409). An id `call-<n>` decides a paused agent tool call (issue 42) instead; the answer then
 * has `calls`. Every POST passes the token and same-origin checks. Refuses to start on a non-loopback
 * address without a token.
 *
 * With `engine: 'lanes'` it shows the lanes engine: `POST /api/replay` takes message ids (UUIDs)
 * and replays through `replayLaneDeadLetters`; approve and reject decide the lanes engine's held
 * messages (migration 027), by row id or message id.
 *
 * @example
 * ```ts
 * const dashboard = await startDashboard({ executor: fromPg(pool), port: 8080 });
 * console.log(`open ${dashboard.url}`);
 * ```
 */
export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  quoteIdentifier(schema);
  const host = options.host ?? '127.0.0.1';
  const loopback = isLoopbackHost(host);
  const token = options.token;
  if (token !== undefined && token.length < 8)
    throw new OutboxValidationError('token', 'must be at least 8 characters');
  if (!loopback && token === undefined)
    throw new OutboxValidationError(
      'token',
      `is required to serve the dashboard on ${host}, which other machines can reach: its replay button changes data (set a token, or bind to 127.0.0.1)`,
    );
  if (options.engine !== undefined && options.engine !== 'lanes' && options.engine !== 'claims')
    throw new OutboxValidationError(
      'engine',
      `must be claims or lanes, got "${String(options.engine)}"`,
    );
  const lanes = (await engineFor(options.executor, options.engine, schema)) === 'lanes';
  const sampling = {
    executor: options.executor,
    schema,
    intervalMs: options.sampleIntervalMs ?? 5_000,
  };
  const laneSampler = lanes ? new LaneDashboardSampler(sampling) : undefined;
  const sampler = laneSampler ?? new DashboardSampler(sampling);

  const server = createServer((request, response) => {
    handle(request, response).catch((error: unknown) => {
      const status =
        error instanceof OutboxValidationError
          ? 400
          : error instanceof OutboxApprovalError
            ? 409
            : 500;
      const message =
        error instanceof OutboxError || status === 400
          ? (error as Error).message
          : 'internal error';
      if (!response.headersSent) send(response, status, { error: message });
      else response.end();
    });
  });

  async function handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const path = (request.url ?? '/').split('?')[0];
    if (path === '/' && request.method === 'GET') {
      response.writeHead(200, {
        'content-type': 'text/html; charset=utf-8',
        'content-security-policy': DASHBOARD_CSP,
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'no-referrer',
        'cache-control': 'no-store',
      });
      response.end(DASHBOARD_HTML);
      return;
    }
    if (!path?.startsWith('/api/')) return send(response, 404, { error: 'not found' });
    if (token !== undefined && !tokenMatches(presentedToken(request), token))
      return send(response, 401, { error: 'token required: Authorization: Bearer <token>' });
    if (path === '/api/state' && request.method === 'GET') {
      return send(
        response,
        200,
        laneSampler
          ? await readLaneDashboardState(options.executor, schema, laneSampler)
          : await readDashboardState(
              options.executor,
              schema,
              sampler.samples(),
              sampler.lastError(),
            ),
      );
    }
    if ((path === '/api/approve' || path === '/api/reject') && request.method === 'POST') {
      const refused = refuseCrossSite(request, loopback);
      if (refused) return send(response, 403, { error: refused });
      const body = decisionBody(await readJson(request), path === '/api/reject');
      if (typeof body === 'string') return send(response, 400, { error: body });
      // `call-<n>`: a paused agent tool call (issue 42), decided on its own (single-use).
      const callIds = body.ids.filter(isCallApprovalRef);
      const messageIds = body.ids.filter((id) => !isCallApprovalRef(id));
      const approve = path === '/api/approve';
      const calls = [];
      for (const id of callIds)
        calls.push(
          await decideCallApproval(options.executor, id, {
            approve,
            by: body.by,
            reason: body.text,
            schema,
          }),
        );
      const extra = calls.length ? { calls } : {};
      if (approve) {
        const approved = messageIds.length
          ? await approveMessages(options.executor, messageIds, {
              by: body.by,
              note: body.text,
              schema,
              engine: lanes ? 'lanes' : 'claims',
            })
          : [];
        return send(response, 200, { approved, ...extra });
      }
      const rejected = messageIds.length
        ? await rejectMessages(options.executor, messageIds, {
            by: body.by,
            reason: body.text ?? '',
            deadLetterPolicy: options.deadLetterPolicy,
            schema,
            engine: lanes ? 'lanes' : 'claims',
          })
        : [];
      return send(response, 200, { rejected, ...extra });
    }
    if (path === '/api/replay' && request.method === 'POST') {
      const refused = refuseCrossSite(request, loopback);
      if (refused) return send(response, 403, { error: refused });
      const body = await readJson(request);
      const ids =
        typeof body === 'object' && body !== null ? (body as { ids?: unknown }).ids : undefined;
      if (!Array.isArray(ids) || ids.length === 0 || !ids.every((id) => typeof id === 'string'))
        return send(response, 400, {
          error: lanes
            ? 'body must be {"ids": ["<message id (UUID)>", ...]}'
            : 'body must be {"ids": ["<row id or message id>", ...]}',
        });
      if (lanes)
        return send(response, 200, {
          replayed: await replayLaneDeadLetters(options.executor, {
            schema,
            messageIds: ids as string[],
          }),
        });
      const replayed = await replayDeadLetters(
        options.executor,
        { ids: ids as string[] },
        { schema },
      );
      return send(response, 200, { replayed });
    }
    if (path === '/api/skip' && request.method === 'POST') {
      const refused = refuseCrossSite(request, loopback);
      if (refused) return send(response, 403, { error: refused });
      // The claim engine has no Skip: its dispatchers' `skip` policy is the way there.
      if (!lanes)
        return send(response, 400, {
          error:
            'Skip is for the lanes engine (outbox ui --engine lanes); on the claim engine run dispatchers with --dead-letter-policy skip',
        });
      const body = await readJson(request);
      const ids =
        typeof body === 'object' && body !== null ? (body as { ids?: unknown }).ids : undefined;
      if (!Array.isArray(ids) || ids.length === 0 || !ids.every((id) => typeof id === 'string'))
        return send(response, 400, { error: 'body must be {"ids": ["<message id (UUID)>", ...]}' });
      return send(response, 200, {
        skipped: await skipLaneDeadLetters(options.executor, {
          schema,
          messageIds: ids as string[],
        }),
      });
    }
    return send(response, 404, { error: 'not found' });
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 8080, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  sampler.start();
  // The first sample carries the charts' history: wait for it, so the first page has it.
  await sampler.sample();
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}/`,
    port,
    sample: () => sampler.sample(),
    async close() {
      await sampler.stop();
      await new Promise<void>((resolve, reject) => {
        server.closeAllConnections();
        server.close((error) => (error ? reject(error) : resolve()));
      });
    },
  };
}

/** `{ ids, by, note? }` / `{ ids, by, reason }` from a decision's body, or what is wrong with it. */
function decisionBody(
  body: unknown,
  reject: boolean,
): { ids: string[]; by: string; text: string | undefined } | string {
  const b = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const textField = reject ? 'reason' : 'note';
  const shape = `body must be {"ids": ["<row id or message id>", ...], "by": "<your name>", ${reject ? '"reason": "<why>"' : '"note"?: "<why>"'}}`;
  if (!Array.isArray(b.ids) || b.ids.length === 0 || !b.ids.every((id) => typeof id === 'string'))
    return shape;
  if (typeof b.by !== 'string' || b.by.trim() === '') return `${shape}: "by" is required`;
  const text = b[textField];
  if (text !== undefined && typeof text !== 'string') return shape;
  if (reject && (text === undefined || text.trim() === ''))
    return 'a rejection needs a reason ("reason")';
  return { ids: b.ids as string[], by: b.by, text: text === undefined ? undefined : text };
}

function send(response: ServerResponse, status: number, body: unknown): void {
  response
    .writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' })
    .end(JSON.stringify(body));
}

async function readJson(request: IncomingMessage): Promise<unknown> {
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of request) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new OutboxValidationError('body', 'is too large');
    chunks.push(chunk as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
  } catch {
    throw new OutboxValidationError('body', 'is not valid JSON');
  }
}
