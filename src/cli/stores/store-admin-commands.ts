import type { DeadLetter, ReplaySelection } from '../../admin/dead-letters.js';
import type { OutboxStatus } from '../../admin/status.js';
import { positiveInt } from '../flags.js';
import { parseDuration } from '../format/duration.js';
import { renderStatus } from '../format/status-view.js';
import { colors } from '../format/table.js';
import { parseFlags } from '../parse-flags.js';
import { EXIT, UsageError } from '../usage-error.js';

/** A store's operator calls, opened for one CLI command (a store other than Postgres). */
export interface AdminStore {
  /** Where the outbox is, for `migrate`'s first line (no password). */
  readonly where: string;
  migrate(
    onMigration: (m: { version: number; name: string }) => void,
  ): Promise<{ applied: number[]; version: number }>;
  status(lastErrors: number): Promise<OutboxStatus>;
  deadLetters(options: { topic?: string; limit: number }): Promise<DeadLetter[]>;
  replay(selection: ReplaySelection): Promise<{ id: string; messageId: string; topic: string }[]>;
  prune(olderThanMs: number, batchSize: number): Promise<number>;
  close(): Promise<void>;
}

const common = {
  'database-url': { type: 'string' },
  json: { type: 'boolean', default: false },
  help: { type: 'boolean', short: 'h', default: false },
} as const;

/**
 * `outbox migrate | status | dead list | replay | prune` on a store other than Postgres: the
 * same output as on Postgres (status, dead letters and replays have the same shapes), minus what
 * the store has not (schemas, approvals, shadow messages, archives). `help` is the store's help
 * text, printed by `--help`.
 */
export function storeAdminCommands(
  open: (purpose: 'migrate' | 'use') => Promise<AdminStore>,
  help: string,
) {
  const printHelp = (): number => {
    process.stdout.write(help);
    return EXIT.ok;
  };
  const withStore = async <T>(
    fn: (store: AdminStore) => Promise<T>,
    purpose: 'migrate' | 'use' = 'use',
  ): Promise<T> => {
    const store = await open(purpose);
    try {
      return await fn(store);
    } finally {
      await store.close();
    }
  };
  return {
    async migrate(argv: string[]): Promise<number> {
      const { values } = parseFlags({ args: argv, options: common, strict: true });
      if (values.help) return printHelp();
      return withStore(async (store) => {
        if (!values.json) process.stdout.write(`Migrating the outbox in ${store.where}\n`);
        const result = await store.migrate((m) => {
          if (!values.json)
            process.stdout.write(`  applying ${String(m.version).padStart(3, '0')} ${m.name}\n`);
        });
        if (values.json) process.stdout.write(`${JSON.stringify(result)}\n`);
        else if (result.applied.length === 0)
          process.stdout.write(`Already at version ${result.version}; nothing to do.\n`);
        else
          process.stdout.write(
            `Done: applied ${result.applied.length} migration(s), now at version ${result.version}.\n`,
          );
        return EXIT.ok;
      }, 'migrate');
    },

    async status(argv: string[]): Promise<number> {
      const { values } = parseFlags({
        args: argv,
        options: { ...common, errors: { type: 'string' } },
        strict: true,
      });
      if (values.help) return printHelp();
      const lastErrors = positiveInt('errors', values.errors, 5);
      return withStore(async (store) => {
        const status = await store.status(lastErrors);
        if (values.json) process.stdout.write(`${JSON.stringify(status)}\n`);
        else
          process.stdout.write(
            renderStatus(status, colors(process.stdout), {
              width: process.stdout.isTTY ? process.stdout.columns : undefined,
            }),
          );
        return EXIT.ok;
      });
    },

    async dead(argv: string[]): Promise<number> {
      const [sub, ...rest] = argv;
      if (sub !== 'list')
        throw new UsageError(
          `unknown subcommand "dead ${sub ?? ''}"; did you mean "outbox dead list"?`,
        );
      const { values } = parseFlags({
        args: rest,
        options: { ...common, topic: { type: 'string' }, limit: { type: 'string' } },
        strict: true,
      });
      if (values.help) return printHelp();
      const limit = positiveInt('limit', values.limit, 100);
      return withStore(async (store) => {
        const dead = await store.deadLetters({ topic: values.topic, limit });
        if (values.json) process.stdout.write(`${JSON.stringify(dead)}\n`);
        else if (dead.length === 0) process.stdout.write('no dead letters\n');
        else
          for (const d of dead)
            process.stdout.write(
              `#${d.id} ${d.messageId} ${d.topic} ${d.aggregateId} seq=${d.sequence} attempts=${d.attempts} dead since ${d.deadLetteredAt.toISOString()}\n    ${d.lastError ?? ''}\n`,
            );
        return EXIT.ok;
      });
    },

    async replay(argv: string[]): Promise<number> {
      const { values, positionals } = parseFlags({
        args: argv,
        options: {
          ...common,
          topic: { type: 'string' },
          'all-dead': { type: 'boolean', default: false },
        },
        allowPositionals: true,
        strict: true,
      });
      if (values.help) return printHelp();
      if (values['all-dead'] && positionals.length)
        throw new UsageError('give ids or --all-dead, not both');
      if (!values['all-dead'] && positionals.length === 0)
        throw new UsageError('give the ids to replay, or --all-dead');
      return withStore(async (store) => {
        const replayed = await store.replay(
          values['all-dead']
            ? { allDead: true, topic: values.topic }
            : { ids: positionals, topic: values.topic },
        );
        const found = new Set(replayed.flatMap((r) => [r.id, r.messageId]));
        const missing = positionals.filter((id) => !found.has(id.toLowerCase()));
        if (values.json)
          process.stdout.write(`${JSON.stringify({ replayed, notDead: missing })}\n`);
        else {
          process.stdout.write(
            `replayed ${replayed.length} message(s)${replayed.length ? `: ${replayed.map((r) => `#${r.id}`).join(' ')}` : ''}\n`,
          );
          if (missing.length)
            process.stderr.write(`not dead letters (left alone): ${missing.join(' ')}\n`);
        }
        return replayed.length > 0 ? EXIT.ok : EXIT.failure;
      });
    },

    async prune(argv: string[]): Promise<number> {
      const { values } = parseFlags({
        args: argv,
        options: {
          ...common,
          'older-than': { type: 'string' },
          'batch-size': { type: 'string' },
        },
        strict: true,
      });
      if (values.help) return printHelp();
      if (values['older-than'] === undefined)
        throw new UsageError('--older-than is required, e.g. --older-than 30d');
      const olderThanMs = parseDuration('older-than', values['older-than']);
      const batchSize = positiveInt('batch-size', values['batch-size'], 1_000);
      return withStore(async (store) => {
        const deleted = await store.prune(olderThanMs, batchSize);
        process.stdout.write(
          values.json
            ? `${JSON.stringify({ deleted })}\n`
            : `deleted ${deleted} dispatched message(s)\n`,
        );
        return EXIT.ok;
      });
    },
  };
}
