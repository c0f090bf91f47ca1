import type { IncomingMessage, ServerResponse } from 'node:http';
import { engineOnce } from './database-engine.js';
import { OutboxValidationError } from '../core/errors.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { ApprovalTokenError, checkSecret, verifyApprovalToken } from '../core/approval-links.js';
import {
  approveMessages,
  OutboxApprovalError,
  rejectMessages,
  type ApprovalEngine,
  type RejectOptions,
} from './approvals.js';
import { decideCallApproval, getCallApproval } from './call-approvals.js';
import { readEffectStatus } from './effect-status.js';

/** Options of {@link createApprovalHandler}. */
export interface ApprovalHandlerOptions {
  /**
   * Secrets that sign approval links, newest first (`approvalLink` signs with the first). Keep a
   * retired secret here while links signed with it are still out.
   */
  secrets: readonly string[];
  /** Where decisions are made: a pool-backed executor, e.g. `fromPg(pool)` (not a transaction). */
  executor: SqlExecutor;
  /** Schema of the outbox. Default `public`. */
  schema?: string;
  /** What a rejected ordered message does to its chain (see `rejectMessages`). Default `hold`. */
  deadLetterPolicy?: RejectOptions['deadLetterPolicy'];
  /** The current time in ms, for tests. Default `Date.now`. */
  now?: () => number;
  /**
   * Which engine's held messages the links are for (default: the schema's, read at the first
   * request and kept): `'lanes'` for a
   * `createOutbox({ engine: 'lanes', approvalRequests: { links } })` writer. Paused tool calls'
   * links (issue 42) are the same on both.
   */
  engine?: ApprovalEngine;
}

/** A stateless approval endpoint for fetch-style servers and for `node:http`. */
export interface ApprovalHandler {
  /** Web-standard: Workers-style servers, Hono, Next.js route handlers, `Bun.serve`. */
  fetch(request: Request): Promise<Response>;
  /** `http.createServer((req, res) => handler.node(req, res))`, or Express/Fastify's raw pair. */
  node(req: IncomingMessage, res: ServerResponse): Promise<void>;
}

const escapeHtml = (text: string) =>
  text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );

/** The decision form: only its POST decides, so a chat app previewing the link decides nothing. */
const buttons = (token: string) =>
  `<form method="post"><input type="hidden" name="token" value="${escapeHtml(token)}">` +
  `<p><label>Reason (for a rejection)<br><textarea name="reason" rows="3" cols="50"></textarea></label></p>` +
  `<button name="decision" value="approve">Approve</button> ` +
  `<button name="decision" value="reject">Reject</button></form>`;

function page(status: number, title: string, body = ''): Response {
  return new Response(
    `<!doctype html><meta charset="utf-8"><meta name="viewport" content="width=device-width">` +
      `<meta name="robots" content="noindex"><title>${escapeHtml(title)}</title>` +
      `<body style="font-family:system-ui;max-width:40rem;margin:2rem auto"><h1>${escapeHtml(title)}</h1>${body}</body>`,
    {
      status,
      headers: {
        'content-type': 'text/html; charset=utf-8',
        'cache-control': 'no-store',
        'referrer-policy': 'no-referrer',
        'x-frame-options': 'DENY',
      },
    },
  );
}

/**
 * The endpoint behind `approvalLink` URLs. GET shows the held message and two buttons; POST (the
 * button) decides: approved, or rejected with the reason typed in, recorded as decided by the
 * person the link was made for, `(approval link)`. Refused: a tampered or malformed token (401),
 * an expired link or an approval past its own deadline (410), a message already decided —
 * whoever decided first, through a link, the CLI, the API or the dashboard (409), a message
 * unknown or never held (404). It keeps no state: the decision is the record, so a replayed link
 * meets a decided message.
 *
 * @example
 * ```ts
 * const approvals = createApprovalHandler({ secrets: [process.env.APPROVAL_SECRET!], executor: fromPg(pool) });
 * http.createServer((req, res) => void approvals.node(req, res)).listen(8080);
 * ```
 */
export function createApprovalHandler(options: ApprovalHandlerOptions): ApprovalHandler {
  if (!Array.isArray(options.secrets) || options.secrets.length === 0)
    throw new OutboxValidationError('secrets', 'give at least one secret, newest first');
  const secrets = options.secrets.map((s, i) => checkSecret(`secrets[${i}]`, s));
  const now = options.now ?? Date.now;
  const schema = options.schema;
  const engineOf = engineOnce(options.engine, options.schema);

  /** The page of a paused tool call (issue 42): its tool and input, and the two buttons. */
  async function showCall(token: string, approvalId: string): Promise<Response> {
    const approval = await getCallApproval(options.executor, approvalId, {
      ...(schema !== undefined && { schema }),
    });
    if (!approval) return page(404, 'No such tool call waits for approval');
    if (approval.state === 'expired')
      return page(410, 'This approval has expired', '<p>It was not decided in time.</p>');
    if (approval.state !== 'awaiting')
      return page(
        409,
        'Already decided',
        `<p>${escapeHtml(`${approval.tool} call ${approval.callId}: ${approval.state}${approval.decidedBy ? ` by ${approval.decidedBy}` : ''}.`)}</p>`,
      );
    return page(
      200,
      `Run ${approval.tool}?`,
      `<p>${escapeHtml(`${approval.tool} (call ${approval.callId}, ${approvalId}) waits for a decision until ${approval.expiresAt.toISOString()}.`)}</p>` +
        `<pre>${escapeHtml(JSON.stringify(approval.input, null, 2))}</pre>` +
        buttons(token),
    );
  }

  async function show(token: string): Promise<Response> {
    const claim = verifyApprovalToken(token, secrets, now());
    if (claim.approvalId !== undefined) return showCall(token, claim.approvalId);
    const { effects } = await readEffectStatus(options.executor, {
      messageIds: [claim.messageId],
      ...(schema !== undefined && { schema }),
      engine: await engineOf(options.executor),
    });
    const effect = effects[0];
    if (!effect || effect.state === 'not found')
      return page(404, 'No such message waits for approval');
    if (effect.state === 'expired')
      return page(410, 'This approval has expired', '<p>It was not decided in time.</p>');
    if (effect.state !== 'awaiting approval')
      return page(
        409,
        'Already decided',
        `<p>${escapeHtml(`${effect.topic} for ${effect.aggregateId}: ${effect.state}${effect.decidedBy ? ` by ${effect.decidedBy}` : ''}.`)}</p>`,
      );
    return page(
      200,
      `Approve ${effect.topic}?`,
      `<p>${escapeHtml(`${effect.topic} for ${effect.aggregateId} (message ${effect.messageId}) waits for a decision until ${effect.expiresAt}.`)}</p>` +
        buttons(token),
    );
  }

  async function decide(form: URLSearchParams): Promise<Response> {
    const claim = verifyApprovalToken(form.get('token'), secrets, now());
    const decision = form.get('decision');
    const by = claim.by ? `${claim.by} (approval link)` : 'approval link';
    const reason = form.get('reason')?.trim();
    try {
      if (claim.approvalId !== undefined) {
        // A paused tool call: recorded like any decision, and delivered to the app's
        // watchCallApprovals callback, which resumes the run.
        if (decision !== 'approve' && decision !== 'reject')
          return page(400, 'Choose approve or reject');
        await decideCallApproval(options.executor, claim.approvalId, {
          approve: decision === 'approve',
          by,
          reason: reason || (decision === 'reject' ? 'rejected from an approval link' : undefined),
          ...(schema !== undefined && { schema }),
        });
        return decision === 'approve'
          ? page(200, 'Approved', '<p>The tool call will run when its conversation resumes.</p>')
          : page(200, 'Rejected', '<p>The tool call will not run.</p>');
      }
      if (decision === 'approve') {
        await approveMessages(options.executor, [claim.messageId], {
          by,
          ...(reason ? { note: reason } : {}),
          ...(schema !== undefined && { schema }),
          engine: await engineOf(options.executor),
        });
        return page(200, 'Approved', '<p>It will be sent now.</p>');
      }
      if (decision === 'reject') {
        await rejectMessages(options.executor, [claim.messageId], {
          by,
          reason: reason || 'rejected from an approval link',
          ...(options.deadLetterPolicy && { deadLetterPolicy: options.deadLetterPolicy }),
          ...(schema !== undefined && { schema }),
          engine: await engineOf(options.executor),
        });
        return page(200, 'Rejected', '<p>It will never be sent.</p>');
      }
      return page(400, 'Choose approve or reject');
    } catch (error) {
      if (error instanceof OutboxApprovalError) {
        const problem = error.problems[0];
        if (problem?.reason === 'expired') return page(410, 'This approval has expired');
        if (problem?.reason === 'decided')
          return page(
            409,
            'Already decided',
            `<p>${escapeHtml(`${problem.state ?? 'decided'}${problem.decidedBy ? ` by ${problem.decidedBy}` : ''}: the first decision stands.`)}</p>`,
          );
        return page(404, 'No such message waits for approval');
      }
      // Another decision holds the row this instant (the decisions lock NOWAIT).
      if ((error as { code?: string }).code === '55P03')
        return page(409, 'Being decided right now', '<p>Reload in a moment.</p>');
      throw error;
    }
  }

  async function handle(request: Request): Promise<Response> {
    try {
      if (request.method === 'GET' || request.method === 'HEAD')
        return await show(new URL(request.url).searchParams.get('token') ?? '');
      if (request.method === 'POST') {
        const text = await request.text();
        if (text.length > 16_384) return page(413, 'Too large');
        return await decide(new URLSearchParams(text));
      }
      return page(405, 'Method not allowed');
    } catch (error) {
      if (error instanceof ApprovalTokenError)
        return error.reason === 'expired'
          ? page(410, 'This approval link has expired', '<p>Ask for a new link.</p>')
          : page(401, 'This approval link is not valid');
      return page(500, 'Could not record the decision', '<p>Nothing was decided. Try again.</p>');
    }
  }

  return {
    fetch: handle,
    async node(req, res) {
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of req) {
        size += (chunk as Buffer).length;
        if (size > 16_384) break;
        chunks.push(chunk as Buffer);
      }
      const method = req.method ?? 'GET';
      const request = new Request(new URL(req.url ?? '/', 'http://approval.invalid'), {
        method,
        headers: { 'content-type': String(req.headers['content-type'] ?? '') },
        ...(method === 'GET' || method === 'HEAD' ? {} : { body: Buffer.concat(chunks) }),
      });
      const response = await handle(request);
      res.writeHead(response.status, Object.fromEntries(response.headers));
      res.end(method === 'HEAD' ? undefined : await response.text());
    },
  };
}
