import { parseFlags } from '../parse-flags.js';
import {
  approveMessages,
  listAwaitingApproval,
  rejectMessages,
  type AwaitingApproval,
  type DecidedMessage,
} from '../../admin/approvals.js';
import {
  decideCallApproval,
  isCallApprovalRef,
  listCallApprovals,
  type CallApproval,
  type CallDecision,
} from '../../admin/call-approvals.js';
import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import { connect, resolveDatabaseUrl } from '../database.js';
import { parseEngineFlag } from '../dispatch/lanes.js';
import { COMMON_OPTIONS, positiveInt, validateSchemaFlag } from '../flags.js';
import { formatAge } from '../format/table.js';
import { EXIT, UsageError } from '../usage-error.js';

export const approvalsHelp = `Usage: outbox approvals [--engine claims|lanes] [--topic GLOB] [--limit N] [--json] [--database-url URL] [--schema NAME]

Lists the messages held for a person's decision, oldest first: row id, message id, topic,
aggregate, how long it has waited and when it expires, who asked (the tool call and its
idempotency key, or the writer's text), the trace id, and a payload summary. Then the agent tool
CALLS paused for a decision (adapters with approval: 'call'): call-<n>, tool, call id, input.
Decide with \`outbox approve\` or \`outbox reject\`.

Options:
  --engine E          claims or lanes (default: the one the schema records, outbox
                      engine): whose held messages (the paused calls are
                      the same on both)
  --topic GLOB        only these topics (payment.*)
  --limit N           at most N messages (default 100)
  --json              one JSON array (keys: id, messageId, topic, aggregateId, sequence,
                      ageSeconds, createdAt, expiresAt, availableAt, requestedBy, traceId,
                      tenantId, payloadSummary, payload)
  --calls             with --json: the paused tool calls instead (keys: approvalId, tool,
                      callId, input, state, requestedBy, requestedAt, expiresAt, stateRef, ...)
  --database-url URL  Postgres connection string (default: $DATABASE_URL)
  --schema NAME       schema of the outbox tables (default: ${DEFAULT_SCHEMA})
`;

export const approveHelp = `Usage: outbox approve <id...> --by NAME [--note TEXT] [--engine claims|lanes] [--json] [--database-url URL] [--schema NAME]

Approves held messages (<id> is a row id or a message id): each is then dispatched like any
other message, at once or at the time it was written for. An <id> call-<n> approves a paused
agent tool call instead (outbox approvals lists them): the application's callback resumes it. Who, when and the note are kept with
the message. All or nothing: if any of them was already decided (approved, rejected or expired),
needs no approval, or does not exist, nothing is approved and the command says why (exit 1).
With --engine lanes, the lanes engine's held messages (ids as its writer returns them, or
message ids).
`;

export const rejectHelp = `Usage: outbox reject <id...> --by NAME --reason TEXT [--dead-letter-policy hold|skip] [--engine claims|lanes] [--json] [--database-url URL] [--schema NAME]

Rejects held messages (<id> is a row id or a message id): kept, never published, visible in
\`outbox status\` and to the agent's effect status tool, with who, when and the reason. An <id>
call-<n> rejects a paused agent tool call: the framework hands the model the reason.
All or nothing, like \`outbox approve\`.

Options:
  --dead-letter-policy P  what a rejected ORDERED message does to the later messages of its
                          aggregate — use the value your dispatchers run with:
                          hold (default): they keep waiting behind it; skip: they go
  --engine E              claims or lanes (default: the schema's, outbox engine): whose
                          held messages
`;

const common = { ...COMMON_OPTIONS, topic: { type: 'string' } } as const;
const engineOption = { engine: { type: 'string' } } as const;

function printAwaiting(list: readonly AwaitingApproval[]): void {
  if (list.length === 0) {
    process.stdout.write('nothing waits for approval\n');
    return;
  }
  const now = Date.now();
  for (const m of list) {
    const expires = formatAge(Math.max(0, (m.expiresAt.getTime() - now) / 1000));
    const asked = [
      m.requestedBy ? `requested by ${m.requestedBy}` : undefined,
      m.traceId ? `trace ${m.traceId}` : undefined,
      m.tenantId ? `tenant ${m.tenantId}` : undefined,
    ].filter(Boolean);
    process.stdout.write(
      `#${m.id} ${m.messageId} ${m.topic} ${m.aggregateId} seq=${m.sequence} waiting ${formatAge(m.ageSeconds)} (expires in ${expires})\n` +
        `${asked.length ? `    ${asked.join(' · ')}\n` : ''}    ${m.payloadSummary}\n`,
    );
  }
}

function printCalls(list: readonly CallApproval[]): void {
  if (list.length === 0) return;
  process.stdout.write('tool calls paused for a decision:\n');
  const now = Date.now();
  for (const c of list) {
    const expires = formatAge(Math.max(0, (c.expiresAt.getTime() - now) / 1000));
    const input = JSON.stringify(c.input) ?? 'null';
    process.stdout.write(
      `${c.approvalId} ${c.tool} call ${c.callId} waiting ${formatAge(Math.max(0, (now - c.requestedAt.getTime()) / 1000))} (expires in ${expires})${c.stateRef ? ` · run ${c.stateRef}` : ''}\n` +
        `    ${input.length > 120 ? `${input.slice(0, 119)}…` : input}\n`,
    );
  }
}

/** Decides the `call-<n>` ids one by one (each is single-use); returns what was decided. */
async function decideCalls(
  executor: Parameters<typeof decideCallApproval>[0],
  refs: readonly string[],
  options: { approve: boolean; by: string; reason?: string; schema?: string },
): Promise<CallDecision[]> {
  const decided: CallDecision[] = [];
  for (const ref of refs) decided.push(await decideCallApproval(executor, ref, options));
  return decided;
}

function printDecidedCalls(decided: readonly CallDecision[], verb: string): void {
  for (const d of decided)
    process.stdout.write(`${verb} ${d.approvalId} ${d.tool} call ${d.callId}\n`);
}

/** `outbox approvals`: what waits for a decision. */
export async function approvalsCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags({
    args: argv,
    options: { ...common, ...engineOption, limit: { type: 'string' }, calls: { type: 'boolean' } },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    process.stdout.write(approvalsHelp);
    return EXIT.ok;
  }
  if (positionals.length)
    throw new UsageError(
      `unexpected "${positionals[0]}": to decide, run outbox approve <id...> or outbox reject <id...>`,
    );
  validateSchemaFlag(values.schema);
  const engine = parseEngineFlag(values.engine);
  const limit = positiveInt('limit', values.limit, 100);
  const db = await connect(resolveDatabaseUrl(values['database-url']));
  try {
    if (values.calls) {
      const calls = await listCallApprovals(db.executor, { schema: values.schema, limit });
      if (values.json) process.stdout.write(`${JSON.stringify(calls)}\n`);
      else printCalls(calls);
      return EXIT.ok;
    }
    const list = await listAwaitingApproval(db.executor, {
      schema: values.schema,
      topic: values.topic,
      limit,
      engine,
    });
    if (values.json) {
      process.stdout.write(`${JSON.stringify(list)}\n`);
      return EXIT.ok;
    }
    const calls = await listCallApprovals(db.executor, { schema: values.schema, limit });
    if (list.length > 0 || calls.length === 0) printAwaiting(list);
    printCalls(calls);
    return EXIT.ok;
  } finally {
    await db.close();
  }
}

function requireFlag(name: string, value: string | undefined): string {
  if (value === undefined || value.trim() === '')
    throw new UsageError(`--${name} is required${name === 'by' ? ' (who decides)' : ''}`);
  return value;
}

function printDecided(decided: readonly DecidedMessage[], json: boolean, verb: string): void {
  if (json) process.stdout.write(`${JSON.stringify({ [verb]: decided })}\n`);
  else
    for (const d of decided)
      process.stdout.write(`${verb} #${d.id} ${d.messageId} ${d.topic} ${d.aggregateId}\n`);
}

/** `outbox approve <id...> --by NAME [--note TEXT]`. */
export async function approveCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags({
    args: argv,
    options: {
      ...COMMON_OPTIONS,
      ...engineOption,
      by: { type: 'string' },
      note: { type: 'string' },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    process.stdout.write(approveHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  if (positionals.length === 0) throw new UsageError('give the ids to approve');
  const engine = parseEngineFlag(values.engine);
  const by = requireFlag('by', values.by);
  const db = await connect(resolveDatabaseUrl(values['database-url']));
  try {
    const calls = positionals.filter(isCallApprovalRef);
    const messages = positionals.filter((id) => !isCallApprovalRef(id));
    const decided = messages.length
      ? await approveMessages(db.executor, messages, {
          by,
          note: values.note,
          schema: values.schema,
          engine,
        })
      : [];
    const decidedCalls = await decideCalls(db.executor, calls, {
      approve: true,
      by,
      reason: values.note,
      schema: values.schema,
    });
    if (values.json && decidedCalls.length)
      process.stdout.write(`${JSON.stringify({ approved: decided, calls: decidedCalls })}\n`);
    else {
      if (messages.length) printDecided(decided, values.json, 'approved');
      printDecidedCalls(decidedCalls, 'approved');
    }
    return EXIT.ok;
  } finally {
    await db.close();
  }
}

/** `outbox reject <id...> --by NAME --reason TEXT [--dead-letter-policy hold|skip]`. */
export async function rejectCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags({
    args: argv,
    options: {
      ...COMMON_OPTIONS,
      ...engineOption,
      by: { type: 'string' },
      reason: { type: 'string' },
      'dead-letter-policy': { type: 'string' },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    process.stdout.write(rejectHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  if (positionals.length === 0) throw new UsageError('give the ids to reject');
  const engine = parseEngineFlag(values.engine);
  const by = requireFlag('by', values.by);
  const reason = requireFlag('reason', values.reason);
  const policy = values['dead-letter-policy'] ?? 'hold';
  if (policy !== 'hold' && policy !== 'skip')
    throw new UsageError(`--dead-letter-policy must be hold or skip, got "${policy}"`);
  const db = await connect(resolveDatabaseUrl(values['database-url']));
  try {
    const calls = positionals.filter(isCallApprovalRef);
    const messages = positionals.filter((id) => !isCallApprovalRef(id));
    const decided = messages.length
      ? await rejectMessages(db.executor, messages, {
          by,
          reason,
          deadLetterPolicy: policy,
          schema: values.schema,
          engine,
        })
      : [];
    const decidedCalls = await decideCalls(db.executor, calls, {
      approve: false,
      by,
      reason,
      schema: values.schema,
    });
    if (values.json && decidedCalls.length)
      process.stdout.write(`${JSON.stringify({ rejected: decided, calls: decidedCalls })}\n`);
    else {
      if (messages.length) printDecided(decided, values.json, 'rejected');
      printDecidedCalls(decidedCalls, 'rejected');
    }
    return EXIT.ok;
  } finally {
    await db.close();
  }
}
