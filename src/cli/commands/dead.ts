import { parseFlags } from '../parse-flags.js';
import { listDeadLetters, replayDeadLetters } from '../../admin/dead-letters.js';
import { listLaneDeadLetters, replayLaneDeadLetters } from '../../lanes/lane-admin.js';
import { engineOfCommand, parseEngineFlag } from '../dispatch/lanes.js';
import { connect, resolveDatabaseUrl } from '../database.js';
import { positiveInt, validateSchemaFlag, COMMON_OPTIONS } from '../flags.js';
import { EXIT, UsageError } from '../usage-error.js';

export const deadHelp = `Usage: outbox dead list [--topic GLOB] [--limit N] [--engine claims|lanes] [--json] [--database-url URL] [--schema NAME]

Lists dead-lettered messages (oldest first): messages that stopped retrying after
--max-attempts or a permanent publish error. Replay them with \`outbox replay\`.
--engine lanes lists the lanes engine's (ids as <lane>:<id>, with their payloads).
`;

export const replayHelp = `Usage: outbox replay <id...> | --all-dead [--topic GLOB] [--engine claims|lanes] [--database-url URL] [--schema NAME]

Makes dead letters pending again: attempts reset to 0, due now, same message id (consumers
still deduplicate). <id> is a row id or a message id (UUID); with --engine lanes, a message id
only. Ids that are not dead letters are reported and left alone. Exit 1 when nothing matched.
`;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const common = {
  ...COMMON_OPTIONS,
  topic: { type: 'string' },
  engine: { type: 'string' },
} as const;

export async function deadCommand(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === '-h' || sub === '--help') {
    process.stdout.write(deadHelp);
    return sub === undefined ? EXIT.usage : EXIT.ok;
  }
  if (sub !== 'list')
    throw new UsageError(`unknown subcommand "dead ${sub}"; did you mean "outbox dead list"?`);
  const { values } = parseFlags({
    args: rest,
    options: { ...common, limit: { type: 'string' } },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(deadHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  const flag = parseEngineFlag(values.engine);
  const limit = positiveInt('limit', values.limit, 100);
  const db = await connect(resolveDatabaseUrl(values['database-url']));
  try {
    const engine = await engineOfCommand(db.executor, flag, values.schema);
    const list = engine === 'lanes' ? listLaneDeadLetters : listDeadLetters;
    const dead = await list(db.executor, { schema: values.schema, topic: values.topic, limit });
    if (values.json) {
      process.stdout.write(`${JSON.stringify(dead)}\n`);
    } else if (dead.length === 0) {
      process.stdout.write('no dead letters\n');
    } else {
      for (const d of dead) {
        process.stdout.write(
          `#${d.id} ${d.messageId} ${d.topic} ${d.aggregateId} seq=${d.sequence} attempts=${d.attempts} dead since ${d.deadLetteredAt.toISOString()}\n    ${d.lastError ?? ''}\n`,
        );
      }
    }
    return EXIT.ok;
  } finally {
    await db.close();
  }
}

export async function replayCommand(argv: string[]): Promise<number> {
  const { values, positionals } = parseFlags({
    args: argv,
    options: { ...common, 'all-dead': { type: 'boolean', default: false } },
    allowPositionals: true,
    strict: true,
  });
  if (values.help) {
    process.stdout.write(replayHelp);
    return EXIT.ok;
  }
  validateSchemaFlag(values.schema);
  if (values['all-dead'] && positionals.length)
    throw new UsageError('give ids or --all-dead, not both');
  if (!values['all-dead'] && positionals.length === 0)
    throw new UsageError('give the ids to replay, or --all-dead');
  const flag = parseEngineFlag(values.engine);
  const notUuid = positionals.find((id) => !UUID.test(id));
  if (flag === 'lanes' && notUuid !== undefined)
    throw new UsageError(`with --engine lanes give message ids (UUID), got "${notUuid}"`);
  const db = await connect(resolveDatabaseUrl(values['database-url']));
  try {
    const lanes = (await engineOfCommand(db.executor, flag, values.schema)) === 'lanes';
    if (lanes && notUuid !== undefined)
      throw new UsageError(
        `schema "${values.schema}" records the lanes engine (outbox engine): give message ids (UUID), got "${notUuid}"`,
      );
    const selection = values['all-dead']
      ? { allDead: true as const, topic: values.topic }
      : { ids: positionals, topic: values.topic };
    const replayed = lanes
      ? await replayLaneDeadLetters(db.executor, {
          schema: values.schema,
          topic: values.topic,
          ...(!values['all-dead'] && { messageIds: positionals }),
        })
      : await replayDeadLetters(db.executor, selection, { schema: values.schema });
    const found = new Set(replayed.flatMap((r) => [r.id, r.messageId]));
    const missing = positionals.filter((id) => !found.has(id.toLowerCase()));
    if (values.json) {
      process.stdout.write(`${JSON.stringify({ replayed, notDead: missing })}\n`);
    } else {
      process.stdout.write(
        `replayed ${replayed.length} message(s)${replayed.length ? `: ${replayed.map((r) => `#${r.id}`).join(' ')}` : ''}\n`,
      );
      if (missing.length)
        process.stderr.write(`not dead letters (left alone): ${missing.join(' ')}\n`);
    }
    return replayed.length > 0 ? EXIT.ok : EXIT.failure;
  } finally {
    await db.close();
  }
}
