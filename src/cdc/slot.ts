import { OutboxError, toError } from '../core/errors.js';
import { quoteIdentifier } from '../core/identifier.js';
import {
  createPublicationSql,
  createSlotSql,
  currentDatabaseSql,
  publicationExistsSql,
  slotLagSql,
  slotSql,
} from '../sql/cdc.js';
import type { SqlExecutor } from '../store/sql-executor.js';
import { formatLsn, parseLsn, type Lsn } from './lsn.js';

/**
 * Default slot name: `agent_outbox_<database>_<schema>`, squeezed into the 63 characters of
 * [a-z0-9_] a slot name allows. Slots are cluster-wide, so the database is part of the name:
 * two databases with an outbox in `public` must not share (and steal) one slot.
 */
export function defaultSlotName(database: string, schema: string): string {
  const clean = (s: string) => s.toLowerCase().replace(/[^a-z0-9_]/g, '_');
  return `agent_outbox_${clean(database)}_${clean(schema)}`.slice(0, 63);
}

/** Default publication name (publications are per database): `agent_outbox_<schema>`. */
export function defaultPublicationName(schema: string): string {
  return `agent_outbox_${schema}`.slice(0, 63);
}

/** The connection's database name. */
export async function currentDatabase(executor: SqlExecutor): Promise<string> {
  const { rows } = await executor.query<{ name: string }>(currentDatabaseSql);
  return rows[0]!.name;
}

/**
 * Creates the publication of the outbox's INSERTs unless it exists. Safe to race. `create` makes
 * the statement (default: the claim engine's table; sql/cdc.ts `createLanePublicationSql` for
 * the lanes engine's).
 */
export async function ensurePublication(
  executor: SqlExecutor,
  publication: string,
  schema: string,
  create: (publication: string, schema: string) => string = createPublicationSql,
): Promise<void> {
  const { rows } = await executor.query(publicationExistsSql, [publication]);
  if (rows.length > 0) return;
  try {
    await executor.query(
      create(quoteIdentifier(publication, 'publication'), quoteIdentifier(schema)),
    );
  } catch (error) {
    // Another dispatcher created it between our check and our CREATE: fine.
    if ((error as { code?: string }).code !== '42710') throw error;
  }
}

/** What {@link ensureSlot} found or made. */
export interface SlotInfo {
  created: boolean;
  /** Where a stream on this slot resumes. */
  confirmedLsn: Lsn;
}

/**
 * Reuses the slot, or creates it. Refuses a same-named slot of another database or plugin
 * rather than streaming someone else's changes.
 */
export async function ensureSlot(
  executor: SqlExecutor,
  slot: string,
  database: string,
): Promise<SlotInfo> {
  quoteIdentifier(slot, 'slotName');
  const existing = await readSlot(executor, slot);
  if (existing) {
    if (existing.database !== database || existing.plugin !== 'pgoutput') {
      throw new OutboxError(
        'OUTBOX_CDC_SLOT',
        `replication slot "${slot}" belongs to database "${existing.database}" with plugin "${existing.plugin}"; choose another slotName`,
      );
    }
    return { created: false, confirmedLsn: parseLsn(existing.confirmedLsn ?? '0/0') };
  }
  try {
    const { rows } = await executor.query<{ lsn: string }>(createSlotSql, [slot]);
    return { created: true, confirmedLsn: parseLsn(rows[0]!.lsn) };
  } catch (error) {
    if ((error as { code?: string }).code !== '42710') throw error;
    return ensureSlot(executor, slot, database); // created concurrently: reuse it
  }
}

/**
 * The slot is gone: a failover to a standby that did not have it (PostgreSQL 16 and older copy
 * no logical slot to standbys; 17+ can, see docs/failure-handling.md), or dropped by hand.
 * Creates it (and the publication) anew, so streaming resumes from now on; `recreated` gets what
 * was found or made. Returns the error to report in place of `error`, saying what happened; a
 * failure to recreate (`recreated` throwing included) is reported the same way, to be retried.
 */
export async function recreateSlot(
  executor: SqlExecutor,
  names: { slot: string; publication: string; schema: string },
  error: Error,
  recreated: (slot: SlotInfo) => void,
): Promise<Error> {
  try {
    const database = await currentDatabase(executor);
    await ensurePublication(executor, names.publication, names.schema);
    const slot = await ensureSlot(executor, names.slot, database);
    recreated(slot);
    return new Error(
      `replication slot "${names.slot}" was gone (a failover to a standby without it, or dropped): recreated at ${formatLsn(slot.confirmedLsn)}; the sweeper publishes what was committed before (${error.message})`,
      { cause: error },
    );
  } catch (recreate) {
    return new Error(
      `replication slot "${names.slot}" is gone and could not be recreated: ${toError(recreate).message}; retrying (${error.message})`,
      { cause: error },
    );
  }
}

async function readSlot(executor: SqlExecutor, slot: string) {
  const { rows } = await executor.query<{
    database: string | null;
    plugin: string | null;
    confirmedLsn: string | null;
  }>(slotSql, [slot]);
  return rows[0];
}

/**
 * WAL (in bytes) the server retains for the slot: what it has written minus what the slot
 * confirmed. `null` when the slot does not exist. Export it as a gauge (`outbox_cdc_slot_lag_bytes`)
 * and alert on it: a stuck or abandoned slot fills the disk.
 *
 * @example
 * ```ts
 * const lag = await readSlotLag(fromPg(pool), 'agent_outbox_app_public');
 * ```
 */
export async function readSlotLag(executor: SqlExecutor, slot: string): Promise<number | null> {
  const { rows } = await executor.query<{ lagBytes: number | null }>(slotLagSql, [slot]);
  const lag = rows[0]?.lagBytes;
  return lag === undefined || lag === null ? null : Number(lag);
}
