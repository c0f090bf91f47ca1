import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { withDatabase } from './url.js';
import type { ExpectedMessage } from './history.js';
import { createOutbox, fromPg, type JsonValue } from '../../src/index.js';

/**
 * A family of tenant databases for fleet tests: all named `<run prefix>_<family>_<n>`, so a glob
 * (`family.glob`) matches them and nothing else on a server shared with other test runs.
 */
export interface TenantFamily {
  /** `…_t<hex>_*`. */
  glob: string;
  /** Name of tenant n. */
  name(n: number): string;
  url(name: string): string;
  /** Clones the migrated template (or an empty database) as tenant n. */
  create(n: number, options?: { migrated?: boolean }): Promise<string>;
  /** Tenants 0 to count - 1, five clones at a time. */
  createMany(count: number): Promise<void>;
  /**
   * An empty database outside the glob, for a fleet's control connection and ownership table:
   * every connection of the processes under test is then told apart in pg_stat_activity from
   * those of other test files. Its URL; dropped by {@link TenantFamily.dropAll}.
   */
  createControl(): Promise<string>;
  drop(name: string): Promise<void>;
  /** Drops every tenant of the family (WITH FORCE). */
  dropAll(): Promise<void>;
  admin(): Promise<pg.Client>;
}

export function tenantFamily(): TenantFamily {
  const base = `${inject('databasePrefix')}_t${randomBytes(3).toString('hex')}`;
  const adminUrl = inject('adminDatabaseUrl');
  const created = new Set<string>();
  const admin = async () => {
    const client = new pg.Client({ connectionString: adminUrl });
    client.on('error', () => undefined);
    await client.connect();
    return client;
  };
  const family: TenantFamily = {
    glob: `${base}_*`,
    name: (n) => `${base}_${String(n).padStart(3, '0')}`,
    url: (name) => withDatabase(adminUrl, name),
    admin,
    async create(n, options = {}) {
      const name = family.name(n);
      const template = options.migrated === false ? 'template0' : inject('templateDatabase');
      const client = await admin();
      try {
        for (let attempt = 0; ; attempt++) {
          try {
            await client.query(`CREATE DATABASE "${name}" TEMPLATE "${template}"`);
            break;
          } catch (error) {
            if ((error as { code?: string }).code !== '55006' || attempt > 30) throw error;
            await new Promise((r) => setTimeout(r, 100 + Math.random() * 200));
          }
        }
      } finally {
        await client.end();
      }
      created.add(name);
      return name;
    },
    async createMany(count) {
      for (let n = 0; n < count; n += 5)
        await Promise.all(
          Array.from({ length: Math.min(5, count - n) }, (_, i) => family.create(n + i)),
        );
    },
    async createControl() {
      const name = `${base}ctl`;
      const client = await admin();
      try {
        await client.query(`CREATE DATABASE "${name}"`);
      } finally {
        await client.end();
      }
      created.add(name);
      return family.url(name);
    },
    async drop(name) {
      const client = await admin();
      try {
        await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      } finally {
        await client.end();
      }
      created.delete(name);
    },
    async dropAll() {
      for (const name of [...created]) await family.drop(name);
    },
  };
  return family;
}

/** Commits the messages in one transaction on the database at `url`, by plain SQL inserts. */
export async function commitMessages(
  url: string,
  messages: { topic: string; aggregateId: string; payload: unknown }[],
): Promise<string[]> {
  return (await commitWithSequences(url, messages)).map((m) => m.messageId);
}

/** Which engine's writer a test's tenants are written with. */
export type TenantEngine = 'claims' | 'lanes';

const lanesOutboxes = new Map<string, ReturnType<typeof createOutbox>>();
const lanesOutbox = (schema = 'public') => {
  let outbox = lanesOutboxes.get(schema);
  if (!outbox) lanesOutboxes.set(schema, (outbox = createOutbox({ engine: 'lanes', schema })));
  return outbox;
};

/**
 * {@link commitMessages}, with each message's per-aggregate sequence (for the history checker).
 * `lanes`: written with `createOutbox({ engine: 'lanes' })`; else into the claim engine's
 * `outbox`; in `schema` either way (default: the search path's, `public`).
 */
export async function commitWithSequences(
  url: string,
  messages: { topic: string; aggregateId: string; payload: unknown }[],
  options: { engine?: TenantEngine; schema?: string } = {},
): Promise<{ messageId: string; aggregateId: string; sequence: number }[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('BEGIN');
    if (options.engine === 'lanes') {
      const written = await lanesOutbox(options.schema).enqueue(
        fromPg(client),
        messages.map((m) => ({ ...m, payload: m.payload as JsonValue })),
      );
      await client.query('COMMIT');
      return written.map((m) => ({
        messageId: m.messageId,
        aggregateId: m.aggregateId,
        sequence: m.sequence,
      }));
    }
    const out: { messageId: string; aggregateId: string; sequence: number }[] = [];
    for (const m of messages) {
      const { rows } = await client.query<{ message_id: string; sequence: string }>(
        `INSERT INTO ${options.schema ? `"${options.schema}".` : ''}outbox (aggregate_id, topic, payload) VALUES ($1, $2, $3) RETURNING message_id::text, sequence::text`,
        [m.aggregateId, m.topic, JSON.stringify(m.payload)],
      );
      out.push({
        messageId: rows[0]!.message_id,
        aggregateId: m.aggregateId,
        sequence: Number(rows[0]!.sequence),
      });
    }
    await client.query('COMMIT');
    return out;
  } finally {
    await client.end();
  }
}

/**
 * Writes `rounds` rounds into the first `tenants` databases of `family`: in each round one
 * transaction per database of `perTransaction` `payment.charge` messages on two aggregates
 * (`<n>:agg-0`, `<n>:agg-1`), the databases in parallel, `pauseMs` between rounds. What it wrote,
 * as the history checker expects it (ordered).
 */
export async function writeTenantRounds(
  family: TenantFamily,
  options: {
    tenants: number;
    rounds: number;
    perTransaction: number;
    pauseMs?: number;
    engine?: TenantEngine;
  },
): Promise<ExpectedMessage[]> {
  const expected: ExpectedMessage[] = [];
  for (let round = 0; round < options.rounds; round++) {
    await Promise.all(
      Array.from({ length: options.tenants }, async (_, n) => {
        const messages = Array.from({ length: options.perTransaction }, (_, i) => ({
          topic: 'payment.charge',
          aggregateId: `${n}:agg-${i % 2}`,
          payload: { round, i },
        }));
        const written = await commitWithSequences(family.url(family.name(n)), messages, {
          engine: options.engine,
        });
        for (const m of written) expected.push({ ...m, ordered: true });
      }),
    );
    if (options.pauseMs) await new Promise((r) => setTimeout(r, options.pauseMs));
  }
  return expected;
}
