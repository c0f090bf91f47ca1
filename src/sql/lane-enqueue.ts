/** Messages of one transaction a NOTIFY names, as the writer's statement names at most 64. */
const NAMED_MAX = 64;

/**
 * Plain-SQL enqueue on the lanes engine (migration 030): what the claim engine's insert trigger
 * gives other languages (`INSERT INTO outbox (aggregate_id, topic, payload)`), for
 * `outbox_lane_messages`, without a trigger on that table.
 *
 * Two ways in, one code path:
 * - `outbox_lane_enqueue(topic, aggregate_id, payload, headers, delay_ms, available_at, ordered,
 *   shadow)`: one message, in the caller's transaction, returning its row id, message id,
 *   sequence and lane. Callable from any driver (`SELECT * FROM outbox_lane_enqueue($1, $2,
 *   $3)`), named arguments included.
 * - `outbox_lane_inbox`, a view whose INSTEAD OF INSERT trigger calls the function for each row:
 *   `INSERT INTO outbox_lane_inbox (topic, aggregate_id, payload) VALUES (...), (...)
 *   RETURNING id, message_id` for ORMs and tools that only write tables.
 *
 * Why this shape, and what was rejected:
 * - A trigger on `outbox_lane_messages` (the claim engine's way, migration 001): every enqueue,
 *   the TypeScript writer's included, would pay for it, and the lanes writer's enqueue cost is a
 *   benchmark target (docs/benchmarks.md, `enqueue_vs_pgq`). Nothing here touches the table's
 *   definition: the writer's statement (sql/lanes.ts `laneInsert`) runs exactly as before.
 * - Calling the writer's statement from SQL: it takes a batch as JSON with counts the writer
 *   computes (`n`, `r`), which a Python or Go caller would have to reproduce. The function takes
 *   one message and its arguments as columns; the view gives the multi-row form.
 * - `LANGUAGE sql`: it cannot raise an error that names the bad argument and says what to do;
 *   PL/pgSQL can (the writer's rule: a clear error and nothing written).
 * - A view over `outbox_lane_messages`: a simple view over one table is auto-updatable, so
 *   `DELETE FROM outbox_lane_inbox` would delete messages. The view selects constants and no row
 *   (`WHERE false`): it is only an entrance; an UPDATE or DELETE on it is refused. Read the
 *   messages from `outbox_lane_messages`.
 *
 * The guarantees are the writer's (sql/lanes.ts `insertLaneMessagesSql`), step by step:
 * - The aggregate's counter row in `outbox_aggregates` is upserted first (locking it, and giving
 *   the transaction its xid), THEN the id is taken from `outbox_lane_ids`: writers of one
 *   aggregate serialise on that row, so id order is commit order within an aggregate (migration
 *   024 says why the horizon needs it) and `sequence` counts densely in that order, shared with
 *   TypeScript writers of the same aggregate.
 * - The lane is `outbox_lane_of(aggregate_id)`; `ordered` is the argument, else decided by
 *   `outbox_unordered_topics` as for the writer; a delay is from the transaction's start
 *   (`now()`), as the writer's; `available_at` stays NULL without one (the read then skips the
 *   due-time test, migration 026).
 * - NOTIFY while a dispatcher waits (a live `outbox_waiters` row), delivered at COMMIT, naming
 *   the message as `lane:id` when it is due now, as the writer's NOTIFY does, so an idle lane
 *   dispatcher publishes it by primary key. The first 64 messages of a
 *   transaction are named (a counter in a transaction-local setting); later ones send the plain
 *   wake-up (`''`, which PostgreSQL sends once however often it is queued), so a bulk INSERT
 *   through the view does not queue a notification a row. The writer's statement names at most
 *   64 of a batch too.
 * - `schema_version: "1"` is added to the headers when they have none, as the writer's
 *   `defaultSchemaVersion`; a `tenant_id` header makes the message a tenant's (migration 028).
 *
 * Validation (src/core/validate.ts's essential checks; the error says what to do, and raising
 * aborts the statement, so nothing of it is written): topic and aggregate id present, not blank,
 * at most 255 characters; payload present (SQL NULL is refused: `'null'::jsonb` is the empty
 * payload) and at most `agent_outbox.max_payload_bytes` (default 1 MiB, measured as jsonb's text,
 * which puts a space after each `:` and `,`); headers a JSON object of string values with
 * non-empty names, at most `agent_outbox.max_headers_bytes` (default 64 KiB); a `tenant_id`
 * header not blank and at most 255 characters; `delay_ms` finite and >= 0, not with
 * `available_at`; `available_at` finite (infinity is how a held message waits: write held
 * messages with the TypeScript writer). NUL characters and unpaired surrogates never get this
 * far: PostgreSQL's text and jsonb input refuse them. Dedupe keys and held messages are the
 * TypeScript writer's only (docs/lanes.md).
 *
 * Cost, measured by hand (psql, 10,000 messages on 100 aggregates in one transaction, the shared
 * 2-core machine at a load of 5): 0.76–0.91 s through the function, 0.76–0.78 s through the view,
 * about 0.08 ms a message, the validation included. A plain-SQL caller pays it; the TypeScript
 * writer's statement is not changed by any of this.
 */
export const laneEnqueueFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_enqueue(
  topic text, aggregate_id text, payload jsonb, headers jsonb DEFAULT '{}',
  delay_ms double precision DEFAULT NULL, available_at timestamptz DEFAULT NULL,
  ordered boolean DEFAULT NULL, shadow boolean DEFAULT false,
  OUT id bigint, OUT message_id uuid, OUT sequence bigint, OUT lane smallint)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
  -- The arguments under names no column has (the upsert's conflict target names aggregate_id).
  v_topic text := topic;
  v_aggregate text := aggregate_id;
  v_payload jsonb := payload;
  v_headers jsonb := coalesce(headers, '{}'::jsonb);
  v_delay double precision := delay_ms;
  v_at timestamptz := available_at;
  v_ordered boolean := ordered;
  v_shadow boolean := coalesce(shadow, false);
  v_limit bigint;
  v_bad text;
  v_sequence bigint;
  v_named integer;
  v_channel text;
BEGIN
  IF v_topic IS NULL OR v_topic ~ '^\\s*$' THEN
    RAISE EXCEPTION 'agent-outbox: topic must not be empty' USING ERRCODE = '22023',
      HINT = 'Give the message''s topic, e.g. ''payment.charge''.';
  END IF;
  IF length(v_topic) > 255 THEN
    RAISE EXCEPTION 'agent-outbox: topic is % characters long; the limit is 255', length(v_topic)
      USING ERRCODE = '22023';
  END IF;
  IF v_aggregate IS NULL OR v_aggregate ~ '^\\s*$' THEN
    RAISE EXCEPTION 'agent-outbox: aggregate_id must not be empty' USING ERRCODE = '22023',
      HINT = 'Give the id of the entity the message is about (e.g. ''order-42''): its messages are published in order.';
  END IF;
  IF length(v_aggregate) > 255 THEN
    RAISE EXCEPTION 'agent-outbox: aggregate_id is % characters long; the limit is 255',
      length(v_aggregate) USING ERRCODE = '22023';
  END IF;
  IF v_payload IS NULL THEN
    RAISE EXCEPTION 'agent-outbox: payload is missing' USING ERRCODE = '22023',
      HINT = 'Use ''null''::jsonb for an empty payload.';
  END IF;
  v_limit := coalesce(nullif(current_setting('agent_outbox.max_payload_bytes', true), '')::bigint,
                      1048576);
  IF octet_length(v_payload::text) > v_limit THEN
    RAISE EXCEPTION 'agent-outbox: payload is % bytes serialised; the limit is %',
      octet_length(v_payload::text), v_limit USING ERRCODE = '22023',
      HINT = 'Store the body elsewhere and send a reference, or raise the setting agent_outbox.max_payload_bytes.';
  END IF;
  IF jsonb_typeof(v_headers) <> 'object' THEN
    RAISE EXCEPTION 'agent-outbox: headers must be a JSON object of string to string, got a JSON %',
      jsonb_typeof(v_headers) USING ERRCODE = '22023',
      HINT = 'e.g. ''{"tenant_id": "acme"}''::jsonb; ''{}'' for none.';
  END IF;
  SELECT h.key INTO v_bad FROM jsonb_each(v_headers) h
  WHERE h.key = '' OR jsonb_typeof(h.value) <> 'string' LIMIT 1;
  IF FOUND THEN
    IF v_bad = '' THEN
      RAISE EXCEPTION 'agent-outbox: headers has an empty header name' USING ERRCODE = '22023';
    END IF;
    RAISE EXCEPTION 'agent-outbox: headers.% must be a string, got a JSON %', v_bad,
      jsonb_typeof(v_headers -> v_bad) USING ERRCODE = '22023',
      HINT = 'Header values are strings: quote numbers and booleans.';
  END IF;
  v_limit := coalesce(nullif(current_setting('agent_outbox.max_headers_bytes', true), '')::bigint,
                      65536);
  IF octet_length(v_headers::text) > v_limit THEN
    RAISE EXCEPTION 'agent-outbox: headers is % bytes serialised; the limit is %',
      octet_length(v_headers::text), v_limit USING ERRCODE = '22023',
      HINT = 'Raise the setting agent_outbox.max_headers_bytes, or carry the data in the payload.';
  END IF;
  IF v_headers ? 'tenant_id' AND (v_headers ->> 'tenant_id' ~ '^\\s*$'
                                  OR length(v_headers ->> 'tenant_id') > 255) THEN
    RAISE EXCEPTION 'agent-outbox: headers.tenant_id must be a non-empty string of at most 255 characters'
      USING ERRCODE = '22023';
  END IF;
  IF v_delay IS NOT NULL AND v_at IS NOT NULL THEN
    RAISE EXCEPTION 'agent-outbox: give either delay_ms or available_at, not both'
      USING ERRCODE = '22023';
  END IF;
  -- NaN sorts above infinity in PostgreSQL, so this refuses it too.
  IF v_delay IS NOT NULL AND NOT (v_delay >= 0 AND v_delay < 'infinity') THEN
    RAISE EXCEPTION 'agent-outbox: delay_ms must be a finite number >= 0, got %', v_delay
      USING ERRCODE = '22023';
  END IF;
  IF v_at IS NOT NULL AND NOT isfinite(v_at) THEN
    RAISE EXCEPTION 'agent-outbox: available_at must be a finite time, got %', v_at
      USING ERRCODE = '22023',
      HINT = 'A message waiting for a person''s approval is written by the TypeScript writer (requiresApproval).';
  END IF;

  -- The counter row first: locked until COMMIT, and the transaction has its xid (see above).
  INSERT INTO ${s}.outbox_aggregates AS a (aggregate_id, last_sequence) VALUES (v_aggregate, 1)
  ON CONFLICT (aggregate_id) DO UPDATE SET last_sequence = a.last_sequence + 1
  RETURNING a.last_sequence INTO v_sequence;

  INSERT INTO ${s}.outbox_lane_messages AS m
    (lane, id, aggregate_id, sequence, ordered, topic, payload, headers, available_at, shadow)
  VALUES (
    ${s}.outbox_lane_of(v_aggregate),
    nextval('${s}.outbox_lane_ids'),
    v_aggregate,
    v_sequence,
    coalesce(v_ordered, NOT EXISTS (
      SELECT 1 FROM ${s}.outbox_unordered_topics u WHERE v_topic LIKE u.pattern)),
    v_topic,
    v_payload,
    '{"schema_version": "1"}'::jsonb || v_headers,
    CASE WHEN v_at IS NOT NULL THEN v_at
         WHEN v_delay > 0 THEN now() + v_delay * interval '1 millisecond'
    END,
    v_shadow)
  RETURNING m.id, m.message_id, m.sequence, m.lane
  INTO id, message_id, sequence, lane;

  IF EXISTS (SELECT 1 FROM ${s}.outbox_waiters w WHERE w.expires_at > clock_timestamp()) THEN
    -- The channel, <schema>_outbox (sql/notify.ts), from the catalog as migration 005's trigger
    -- takes it from TG_TABLE_SCHEMA, so that the text names no schema (the schema-drift
    -- snapshot compares texts). Only looked up while a dispatcher waits.
    SELECT left(n.nspname, 56) || '_outbox' INTO v_channel
    FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = '${s}.outbox_lane_messages'::regclass;
    v_named := coalesce(nullif(current_setting('agent_outbox.lane_named', true), '')::integer, 0);
    IF v_named < ${NAMED_MAX} AND v_at IS NULL AND coalesce(v_delay, 0) <= 0 THEN
      PERFORM set_config('agent_outbox.lane_named', (v_named + 1)::text, true);
      PERFORM pg_notify(v_channel, lane || ':' || id);
    ELSE
      PERFORM pg_notify(v_channel, '');
    END IF;
  END IF;
END
$fn$`;

/**
 * The entrance for a multi-row `INSERT` (see {@link laneEnqueueFunctionSql}): the writable
 * columns are the function's arguments; `id`, `message_id`, `sequence` and `lane` are set by the
 * trigger, for `RETURNING`. It has no row and is not auto-updatable (it selects from no table).
 */
export const laneInboxViewSql = (s: string) => `
CREATE VIEW ${s}.outbox_lane_inbox AS
SELECT NULL::text AS topic, NULL::text AS aggregate_id, NULL::jsonb AS payload,
       NULL::jsonb AS headers, NULL::double precision AS delay_ms,
       NULL::timestamptz AS available_at, NULL::boolean AS ordered, NULL::boolean AS shadow,
       NULL::bigint AS id, NULL::uuid AS message_id, NULL::bigint AS sequence,
       NULL::smallint AS lane
WHERE false`;

/**
 * The view's INSTEAD OF INSERT trigger function: one {@link laneEnqueueFunctionSql} call a row,
 * in the order PostgreSQL hands them (a multi-row VALUES: its order). Each row locks its
 * aggregate's counter as it comes, so rows of several aggregates lock in the order given: sort
 * them by aggregate_id, as the TypeScript writer does, so that two such transactions cannot
 * deadlock on each other's counters. Ids the caller gives (`id`, `message_id`, ...) are
 * overwritten.
 */
export const laneInboxInsertFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_inbox_insert() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
  SELECT e.id, e.message_id, e.sequence, e.lane
  INTO NEW.id, NEW.message_id, NEW.sequence, NEW.lane
  FROM ${s}.outbox_lane_enqueue(NEW.topic, NEW.aggregate_id, NEW.payload, NEW.headers,
                               NEW.delay_ms, NEW.available_at, NEW.ordered, NEW.shadow) e;
  RETURN NEW;
END
$fn$`;

/** Fires {@link laneInboxInsertFunctionSql} for each row inserted into the view. */
export const laneInboxTriggerSql = (s: string) => `
CREATE TRIGGER outbox_lane_inbox_insert INSTEAD OF INSERT ON ${s}.outbox_lane_inbox
FOR EACH ROW EXECUTE FUNCTION ${s}.outbox_lane_inbox_insert()`;
