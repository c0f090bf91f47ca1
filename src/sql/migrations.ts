/**
 * Statements the migrator runs. The whole migration runs in ONE transaction holding a
 * transaction-scoped advisory lock keyed by the schema name:
 * - a second `outbox migrate` (another pod starting at the same time) blocks on the lock, then
 *   finds every version recorded and applies nothing — both succeed, the schema is applied once;
 * - Postgres DDL is transactional, so a failing migration leaves nothing half-applied.
 * Tried and rejected: a session-level lock (leaks if the client dies without closing),
 * `CREATE ... IF NOT EXISTS` everywhere (hides drift and does not order changes).
 */

/** Lock key: one migrator per schema at a time. hashtext is stable across server versions. */
export const lockSql = `SELECT pg_advisory_xact_lock(hashtext('agent-outbox:migrate'), hashtext($1))`;

export const createSchemaSql = (schema: string) => `CREATE SCHEMA IF NOT EXISTS ${schema}`;

export const createMigrationsTableSql = (schema: string) => `
CREATE TABLE IF NOT EXISTS ${schema}.outbox_migrations (
  version    integer     PRIMARY KEY,
  name       text        NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
)`;

export const appliedVersionsSql = (schema: string) =>
  `SELECT version FROM ${schema}.outbox_migrations ORDER BY version`;

export const recordVersionSql = (schema: string) =>
  `INSERT INTO ${schema}.outbox_migrations (version, name) VALUES ($1, $2)`;

/** Version of an existing schema, without the lock (NULL table means "never migrated"). */
export const currentVersionSql = (schema: string) =>
  `SELECT coalesce(max(version), 0)::int AS version FROM ${schema}.outbox_migrations`;

export const migrationsTableExistsSql = `SELECT to_regclass($1) IS NOT NULL AS exists`;
