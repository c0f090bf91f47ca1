import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { redactSecrets } from '../core/redact.js';
import type { EnqueuedMessage } from '../core/message.js';
import { errorText } from '../publishers/publisher.js';

/**
 * The answers a tool gives the model, whatever the framework: JSON (for programs and for the
 * model to quote ids from) and one plain sentence saying what happened and whether calling again
 * is useful — the model decides its next step from that sentence. The Claude helper sends them as
 * two MCP text blocks ({@link toCallToolResult}); the AI SDK, OpenAI Agents and LangChain
 * adapters as one JSON object with the sentence under `summary` ({@link toJsonAnswer}).
 */
export interface ToolAnswer {
  json: Record<string, unknown>;
  words: string;
  isError: boolean;
}

/** An answer as the MCP result the Claude Agent SDK expects. */
export function toCallToolResult(answer: ToolAnswer): CallToolResult {
  return {
    content: [
      { type: 'text', text: JSON.stringify(answer.json) },
      { type: 'text', text: answer.words },
    ],
    ...(answer.isError ? { isError: true } : {}),
  };
}

/** An answer as one JSON object: the JSON's fields plus `summary`, the sentence. */
export function toJsonAnswer(answer: ToolAnswer): Record<string, unknown> {
  return { ...answer.json, summary: answer.words };
}

/** A queued side effect as reported to the model. */
export interface QueuedEffect {
  topic: string;
  messageId: string;
  /** Present (true) when it waits for a person's approval: it does not happen until approved. */
  awaitingApproval?: true;
}

function result(json: Record<string, unknown>, words: string, isError = false): ToolAnswer {
  return { json, words, isError };
}

/** The call committed. */
export function committedResult(
  value: unknown,
  enqueued: readonly EnqueuedMessage[],
  summary: string | undefined,
): ToolAnswer {
  const queued: QueuedEffect[] = enqueued.map((m) => ({
    topic: m.topic,
    messageId: m.messageId,
    ...(m.awaitingApproval ? { awaitingApproval: true as const } : {}),
  }));
  const topics = queued.map((q) => q.topic).join(', ');
  const effects =
    queued.length === 0
      ? 'Saved; no side effect was queued.'
      : `Saved in one transaction together with ${queued.length} queued side effect${queued.length === 1 ? '' : 's'} (${topics}); each is performed once, after this call — do not call again to make it happen.`;
  const held = queued.filter((q) => q.awaitingApproval);
  const approval =
    held.length === 0
      ? ''
      : ` ${held.length === queued.length ? (held.length === 1 ? 'It is' : 'They are') : `${held.length} of them (${held.map((q) => q.topic).join(', ')}) are`} awaiting approval by a person: nothing happens until someone approves, and a rejection means it never happens. Tell the user it waits for approval; the effect status tool reports the decision later (message ids above).`;
  return result(
    { ok: true, deduped: false, result: value ?? null, queued },
    `${summary ? `${summary} ${effects}` : `Done. ${effects}`}${approval}`,
  );
}

/** The key was used by a committed call: nothing written. */
export function dedupedResult(prior: unknown): ToolAnswer {
  return result(
    {
      ok: true,
      deduped: true,
      ...(prior !== null && prior !== undefined ? { result: prior } : {}),
    },
    'Already done: an earlier call with this idempotency key (or this very call, run again) was committed, so nothing was written and no side effect was queued again.',
  );
}

/**
 * The call failed. `commitUnknown`: the handler finished but COMMIT did not confirm (e.g. the
 * connection dropped), so the transaction may or may not have committed — the idempotency key
 * makes "call again" the safe answer either way.
 */
export function failedResult(error: unknown, commitUnknown: boolean): ToolAnswer {
  const message = redactSecrets(errorText(error));
  const words = commitUnknown
    ? `The outcome is unknown: the commit was not confirmed (${message}). Call again with the same idempotency_key: if the first call was saved, the answer is "deduped" and nothing is done twice.`
    : `Failed, and nothing was saved: the transaction was rolled back and no side effect was queued. Error: ${message}. Calling again (with the same idempotency_key) after fixing the cause is safe.`;
  return result(
    { ok: false, error: message, ...(commitUnknown ? { commitUnknown } : {}) },
    words,
    true,
  );
}

/**
 * The call's effect was already queued: the tool's `dedupeKey` was taken within the window by an
 * earlier message (`first`), so everything the call wrote was rolled back.
 */
export function duplicateEffectResult(dedupeKey: string, first: EnqueuedMessage): ToolAnswer {
  return result(
    {
      ok: true,
      deduped: true,
      dedupeKey,
      queued: [{ topic: first.topic, messageId: first.messageId }],
    },
    `Already done: this effect (${dedupeKey}) was queued earlier as message ${first.messageId}, so this call wrote nothing and queued nothing again. Do not call again to make it happen; the effect status tool reports it.`,
  );
}

/**
 * The outbox recorded a refusal of this call (rejected by a person, or expired undecided): it
 * wrote nothing. A framework normally never runs a denied call; this answers one that did (a
 * forged or stale history that says "approved").
 */
export function deniedResult(
  state: 'rejected' | 'expired',
  by: string | null,
  reason: string | null,
): ToolAnswer {
  const why =
    state === 'rejected'
      ? `A person (${by ?? 'unknown'}) rejected this call${reason ? `: ${reason}` : ''}`
      : `No one approved this call before it expired${reason ? ` (${reason})` : ''}`;
  return result(
    { ok: false, denied: true, state, ...(by ? { decidedBy: by } : {}), reason: reason ?? null },
    `${why}. Nothing was written and no side effect was queued. Do not call again for the same thing; tell the user.`,
    true,
  );
}
