/**
 * `outbox_engine` (migration 036): which engine a schema's defaults follow. One row, so that
 * every writer, dispatcher and command that is not told an engine reads the same answer, and an
 * operator changes it in one place (`outbox engine lanes`) instead of in every process's
 * options. A row and not a comment on the schema or a GUC: a GUC is per role or database, not
 * per schema, and a row is read and changed with the privileges the outbox tables already need.
 *
 * Why a CHECK instead of an enum type: a third name later is one constraint to replace, not a
 * type to alter inside a migration transaction.
 */
export const createEngineTableSql = (s: string) => `
CREATE TABLE ${s}.outbox_engine (
  singleton boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
  engine    text        NOT NULL CHECK (engine IN ('claims', 'lanes')),
  chosen_at timestamptz NOT NULL DEFAULT now()
)`;

/**
 * The record a schema migrated before the engine was recorded starts with: the claim engine,
 * the one its writers and dispatchers used by default until now.
 */
export const recordClaimsEngineSql = (s: string) => `
INSERT INTO ${s}.outbox_engine (engine) VALUES ('claims')`;

/**
 * Whether the record exists, by name ($1 `"schema".outbox_engine`): the read must not fail
 * inside a caller's transaction (an error would abort it) when the schema predates migration
 * 036 — such a schema follows the claim engine, as it did.
 */
export const engineRecordedSql = `SELECT to_regclass($1) IS NOT NULL AS recorded`;

export const readEngineSql = (s: string) => `
SELECT engine, chosen_at AS "chosenAt" FROM ${s}.outbox_engine`;

/**
 * Records $1 as the schema's engine; returns the engine it replaced. The FOR UPDATE subquery
 * reads the previous value under the row lock the UPDATE takes, so two changes at once report
 * each other and not the same previous engine.
 */
export const setEngineSql = (s: string) => `
UPDATE ${s}.outbox_engine e
SET engine = $1, chosen_at = CASE WHEN e.engine = $1 THEN e.chosen_at ELSE now() END
FROM (SELECT engine FROM ${s}.outbox_engine FOR UPDATE) previous
RETURNING previous.engine AS previous, e.chosen_at AS "chosenAt"`;
