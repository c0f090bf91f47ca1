/**
 * Backfill (retrofit, SPEC §4.10): an operator's SELECT, read through a cursor.
 *
 * Why a READ ONLY, REPEATABLE READ transaction on one connection:
 * - READ ONLY makes Postgres refuse anything that writes — a data-modifying CTE, `nextval`, a
 *   function with side effects — so "it must be a SELECT" is enforced by the server, not by
 *   parsing SQL text ourselves (which a CTE or a comment would fool);
 * - REPEATABLE READ gives both passes (validate and count, then write) the same snapshot, so
 *   the rows written are exactly the rows checked against `--limit`, even while the source
 *   tables change.
 * The outbox rows are written on OTHER connections, one transaction per batch, so this long read
 * transaction holds no write locks.
 */
export const beginReadOnlySql = 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY';

/**
 * The operator's query wrapped as a subquery: a second statement (`SELECT 1; DROP ...`) or a
 * bare INSERT/UPDATE/DELETE is then a syntax error, and a missing column is "column
 * q.aggregate_id does not exist" — the shape check. Newlines around the text keep a trailing
 * `-- comment` from swallowing the closing parenthesis. `pg_typeof` lets the caller insist on a
 * json/jsonb payload instead of silently storing a text column as a JSON string. The query's own
 * ORDER BY is kept by the subquery scan.
 *
 * The text is the operator's own file, run with the operator's credentials: it is not user input
 * (and runs read-only).
 */
export const declareBackfillCursorSql = (cursor: string, query: string) => `
DECLARE ${cursor} NO SCROLL CURSOR FOR
SELECT q.aggregate_id::text AS "aggregateId",
       q.payload AS payload,
       pg_typeof(q.payload)::text AS "payloadType"
FROM (
${query}
) AS q`;

/** FETCH takes no parameters: `count` is a checked integer. */
export const fetchSql = (cursor: string, count: number) => `FETCH FORWARD ${count} FROM ${cursor}`;

export const closeCursorSql = (cursor: string) => `CLOSE ${cursor}`;
