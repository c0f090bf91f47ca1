import { LANE_DECISION_LOCK_CLASS } from './lanes.js';

/**
 * Held messages on the lanes engine (migration 027): the writer's rows, the decisions, the expiry
 * sweep, the list and the counts. The claim engine's semantics (docs/approvals.md, sql/approvals.ts);
 * the state lives beside the messages, in `outbox_lane_approvals`, since `outbox_lane_messages`
 * is append-only.
 *
 * - A held message is written with `available_at = infinity`: the lane read
 *   (`outbox_lane_next`, sql/lanes.ts) takes it for a delayed message that is never due, so
 *   that read and the writer's wake-up pay nothing for messages that are not held. Its decision
 *   row says when it is due (`available_at`: the time it was written for, NULL for at once).
 * - A decision sets the state (who, when, note) and then changes what the lane read parked of
 *   it, under the lane's advisory lock ({@link LANE_DECISION_LOCK_CLASS}, exclusive; the read
 *   tries it shared and leaves the lane to its next call while a decision holds it): approved, a
 *   parked row comes due (the parked path publishes it, after what precedes it in its aggregate);
 *   rejected or expired under `hold`, an ordered one stays parked, never due, and blocks its
 *   aggregate for good; otherwise the parked row goes and the aggregate's next parked message
 *   becomes head. Not parked yet: the read applies the decision when it meets the message.
 * - Exactly one decision wins: each locks the decision rows (`FOR NO KEY UPDATE NOWAIT`; the
 *   caller retries a moment later and then finds them decided) and decides all or nothing.
 * - A rejection that removes a parked row first locks its aggregate's blocking parked rows up to
 *   it, in id order: the parked path's settle deletes a published head and then promotes the
 *   next blocking row, so either the settle waits for the rejection (and promotes past the
 *   removed row) or the rejection waits for the settle (and promotes after it).
 * - The functions need READ COMMITTED: each statement must see what committed before it took
 *   the lane lock.
 */

const readCommitted = `
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION 'agent-outbox: a decision on held lane messages needs READ COMMITTED, this transaction runs %',
      current_setting('transaction_isolation');
  END IF;`;

/**
 * The decision rows of held messages the lanes writer just wrote (one statement for the call's
 * held messages, run only when it has some). `$1`: a jsonb array of `{ id, a (aggregate), mi
 * (message id), ar, ae, ax, at, d }`, as the writer's row JSON. The expiry defaults to 7 days
 * from the transaction's start; `available_at` is the time the message was written for
 * (`availableAt`, or `delayMs` from the transaction's start), NULL for at once. Returns each
 * row's message id and expiry (as JSON text, as the claim engine's approval request has it).
 */
export const insertLaneApprovalsSql = (s: string) => `
INSERT INTO ${s}.outbox_lane_approvals
  (id, lane, message_id, requested_by, expires_at, available_at, on_expiry)
SELECT (e->>'id')::bigint,
       ${s}.outbox_lane_of(e->>'a'),
       (e->>'mi')::uuid,
       e->>'ar',
       now() + coalesce((e->>'ae')::float8, 604800000) * interval '1 millisecond',
       CASE WHEN e->>'at' IS NOT NULL THEN (e->>'at')::timestamptz
            WHEN (e->>'d')::float8 > 0 THEN now() + (e->>'d')::float8 * interval '1 millisecond'
       END,
       coalesce(e->>'ax', 'reject')
FROM jsonb_array_elements($1::jsonb) AS e
ORDER BY (e->>'id')::bigint
RETURNING message_id::text AS "messageId", to_jsonb(expires_at) #>> '{}' AS "expiresAt"`;

/**
 * Applies the decisions of `p_ids` (decided in this transaction, their lanes locked) to what is
 * parked of them; see the file comment.
 */
export const laneApplyDecisionsFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_apply_decisions(p_ids bigint[]) RETURNS void
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
  v record;
BEGIN
  FOR v IN
    SELECT a.id, a.lane, a.state, a.available_at, a.dead_blocks, p.ordered, p.aggregate_id
    FROM ${s}.outbox_lane_approvals a
    JOIN ${s}.outbox_lane_parked p ON p.lane = a.lane AND p.id = a.id
    WHERE a.id = ANY (p_ids) AND p.dead_at IS NULL
    ORDER BY a.lane, a.id
  LOOP
    IF v.state = 'approved' THEN
      UPDATE ${s}.outbox_lane_parked p
      SET available_at = greatest(now(), coalesce(v.available_at, now()))
      WHERE p.lane = v.lane AND p.id = v.id;
    ELSIF v.state IN ('rejected', 'expired') AND NOT (v.ordered AND v.dead_blocks) THEN
      IF v.ordered THEN
        PERFORM 1 FROM ${s}.outbox_lane_parked b
        WHERE b.lane = v.lane AND b.aggregate_id = v.aggregate_id AND b.blocks AND b.id <= v.id
        ORDER BY b.id
        FOR UPDATE;
      END IF;
      DELETE FROM ${s}.outbox_lane_parked p WHERE p.lane = v.lane AND p.id = v.id;
      IF v.ordered THEN
        PERFORM ${s}.outbox_lane_promote(ARRAY[v.lane], ARRAY[v.aggregate_id]);
      END IF;
    END IF;
  END LOOP;
END $$`;

/** Takes the decision lock of the lanes of `ids`, in lane order (one order for every decision). */
const lockLanes = (s: string, ids: string) => `
  FOR v_lane IN
    SELECT DISTINCT a.lane FROM ${s}.outbox_lane_approvals a WHERE a.id = ANY (${ids}) ORDER BY a.lane
  LOOP
    PERFORM pg_advisory_xact_lock(${LANE_DECISION_LOCK_CLASS}, v_lane.lane);
  END LOOP;`;

/**
 * One decision: approve (`p_state` 'approved', `p_note` the note) or reject ('rejected', the
 * reason, `p_dead_blocks` true under `hold`) the held messages `p_ids` (row ids) and
 * `p_message_ids`. All or nothing: decided only when every id is a held message still awaiting
 * and not overdue. Returns one row per requested message found, with its state BEFORE the
 * decision (`held` false: a lane message that was not written held) and whether it was decided;
 * the caller says why when it was not (admin/approval-decisions.ts). The lookup by row id alone
 * probes each lane's primary key (16 probes an id) only for ids that are not held.
 */
export const laneDecideFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_decide(p_ids bigint[], p_message_ids uuid[], p_state text,
  p_by text, p_note text, p_dead_blocks boolean)
RETURNS TABLE (id text, "messageId" text, topic text, "aggregateId" text, state text,
               "expiresAt" timestamptz, "decidedBy" text, "decidedAt" timestamptz,
               held boolean, decided boolean)
LANGUAGE plpgsql SET jit = off AS $$
#variable_conflict use_column
DECLARE
  v_wanted bigint[];
  v_ok boolean;
  v_lane record;
BEGIN${readCommitted}
  IF p_state NOT IN ('approved', 'rejected') THEN
    RAISE EXCEPTION 'agent-outbox: outbox_lane_decide takes approved or rejected, got %', p_state;
  END IF;
  SELECT coalesce(array_agg(w.id ORDER BY w.id), '{}') INTO v_wanted FROM (
    SELECT a.id FROM ${s}.outbox_lane_approvals a
    WHERE a.id = ANY (p_ids) OR a.message_id = ANY (p_message_ids)
    ORDER BY a.id
    FOR NO KEY UPDATE NOWAIT) w;
  v_ok := cardinality(v_wanted) > 0
    AND NOT EXISTS (SELECT 1 FROM unnest(p_ids) r (id) WHERE r.id <> ALL (v_wanted))
    AND NOT EXISTS (
      SELECT 1 FROM unnest(p_message_ids) r (message_id)
      WHERE NOT EXISTS (SELECT 1 FROM ${s}.outbox_lane_approvals a
                        WHERE a.message_id = r.message_id AND a.id = ANY (v_wanted)))
    AND NOT EXISTS (
      SELECT 1 FROM ${s}.outbox_lane_approvals a
      WHERE a.id = ANY (v_wanted) AND (a.state <> 'awaiting' OR a.expires_at <= now()));
  RETURN QUERY
  SELECT a.id::text, a.message_id::text, m.topic, m.aggregate_id, a.state, a.expires_at,
         a.decided_by, a.decided_at, true, v_ok
  FROM ${s}.outbox_lane_approvals a
  LEFT JOIN ${s}.outbox_lane_messages m ON m.lane = a.lane AND m.id = a.id
  WHERE a.id = ANY (v_wanted)
  UNION ALL
  SELECT m.id::text, m.message_id::text, m.topic, m.aggregate_id, NULL, NULL, NULL, NULL,
         false, false
  FROM unnest(p_ids) r (id)
  JOIN ${s}.outbox_lanes l ON true
  JOIN ${s}.outbox_lane_messages m ON m.lane = l.lane AND m.id = r.id
  WHERE r.id <> ALL (v_wanted);
  IF NOT v_ok THEN
    RETURN;
  END IF;${lockLanes(s, 'v_wanted')}
  UPDATE ${s}.outbox_lane_approvals a
  SET state = p_state, decided_by = p_by, decided_at = now(), note = p_note,
      dead_blocks = CASE WHEN p_state = 'rejected' THEN p_dead_blocks END
  WHERE a.id = ANY (v_wanted) AND a.state = 'awaiting';
  PERFORM ${s}.outbox_lane_apply_decisions(v_wanted);
END $$`;

/**
 * The expiry sweep of the lanes engine, as the claim engine's (sql/approvals.ts `expireSql`): up
 * to `p_limit` held messages past their expiry become `expired` (decided by `expiry`, the
 * dispatcher's dead-letter policy applied as by a rejection: `p_dead_blocks` true under `hold`),
 * or `approved` when written with `approvalOnExpiry: 'approve'`. One probe of
 * `outbox_lane_approvals_awaiting_idx` when nothing is overdue; rows another decision holds are
 * skipped (SKIP LOCKED) for the next sweep.
 */
export const laneExpireFunctionSql = (s: string) => `
CREATE FUNCTION ${s}.outbox_lane_expire_approvals(p_limit integer, p_dead_blocks boolean)
RETURNS TABLE (id text, "messageId" text, topic text, state text)
LANGUAGE plpgsql SET jit = off AS $$
#variable_conflict use_column
DECLARE
  v_ids bigint[];
  v_lane record;
BEGIN${readCommitted}
  SELECT array_agg(w.id) INTO v_ids FROM (
    SELECT a.id FROM ${s}.outbox_lane_approvals a
    WHERE a.state = 'awaiting' AND a.expires_at <= now()
    ORDER BY a.expires_at
    LIMIT p_limit
    FOR NO KEY UPDATE SKIP LOCKED) w;
  IF v_ids IS NULL THEN
    RETURN;
  END IF;${lockLanes(s, 'v_ids')}
  UPDATE ${s}.outbox_lane_approvals a
  SET state = CASE WHEN a.on_expiry = 'approve' THEN 'approved' ELSE 'expired' END,
      decided_by = 'expiry',
      decided_at = now(),
      note = CASE WHEN a.on_expiry = 'approve' THEN 'approved on expiry: ' ELSE '' END ||
             'no decision before ' ||
             to_char(a.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'),
      dead_blocks = CASE WHEN a.on_expiry = 'approve' THEN NULL ELSE p_dead_blocks END
  WHERE a.id = ANY (v_ids) AND a.state = 'awaiting';
  PERFORM ${s}.outbox_lane_apply_decisions(v_ids);
  RETURN QUERY
  SELECT a.id::text, a.message_id::text, m.topic, a.state
  FROM ${s}.outbox_lane_approvals a
  LEFT JOIN ${s}.outbox_lane_messages m ON m.lane = a.lane AND m.id = a.id
  WHERE a.id = ANY (v_ids)
  ORDER BY a.id;
END $$`;

/**
 * One decision of {@link laneDecideFunctionSql}, in the columns of the claim engine's decisions
 * (sql/approvals.ts): a held lane message is never published before it is approved, and the
 * lanes engine has no writer race to defer for.
 */
export const laneDecideSql = (s: string) => `
SELECT id, "messageId", topic, "aggregateId", state, "expiresAt", "decidedBy", "decidedAt",
       false AS dispatched, decided, false AS deferred
FROM ${s}.outbox_lane_decide($1::bigint[], $2::uuid[], $3, $4, $5, $6)`;

/** One sweep of {@link laneExpireFunctionSql}: $1 batch size, $2 dead letters block (hold). */
export const laneExpireSql = (s: string) =>
  `SELECT * FROM ${s}.outbox_lane_expire_approvals($1, $2)`;

/**
 * Held lane messages waiting for a decision, oldest first, as sql/approvals.ts `listAwaitingSql`
 * (the same columns and parameters): from `outbox_lane_approvals_awaiting_idx`, each message one
 * primary-key probe. Overdue ones are left out: they are expired, swept or not.
 */
export const listLaneAwaitingSql = (s: string) => `
SELECT a.id::text AS id,
       a.message_id::text AS "messageId",
       m.topic,
       m.aggregate_id AS "aggregateId",
       m.sequence::text AS sequence,
       m.payload,
       m.headers->>'traceparent' AS traceparent,
       m.headers->>'tenant_id' AS "tenantId",
       a.requested_by AS "requestedBy",
       m.created_at AS "createdAt",
       a.expires_at AS "expiresAt",
       a.available_at AS "availableAt",
       extract(epoch FROM now() - m.created_at)::float8 AS "ageSeconds"
FROM ${s}.outbox_lane_approvals a
JOIN ${s}.outbox_lane_messages m ON m.lane = a.lane AND m.id = a.id
WHERE a.state = 'awaiting'
  AND a.expires_at > now()
  AND ($1::text IS NULL OR m.topic LIKE $1)
  AND ($3::text IS NULL OR m.headers->>'tenant_id' = $3)
ORDER BY m.created_at, a.id
LIMIT $2`;

/**
 * The approval numbers of `outbox status --engine lanes` and the gauges: waiting (not overdue,
 * from the partial index) and the oldest wait, rejected, and expired (swept, or overdue and not
 * swept yet: expired for everyone already). The decided ones are counted over the decision rows,
 * which are as many as the held messages written.
 */
export const laneApprovalCountsSql = (s: string) => `
SELECT (SELECT count(*) FROM ${s}.outbox_lane_approvals a
        WHERE a.state = 'awaiting' AND a.expires_at > now())::int AS awaiting,
       coalesce(extract(epoch FROM now() - (
         SELECT min(a.requested_at) FROM ${s}.outbox_lane_approvals a
         WHERE a.state = 'awaiting' AND a.expires_at > now())), 0)::float8 AS "oldestAgeSeconds",
       (SELECT count(*) FROM ${s}.outbox_lane_approvals a WHERE a.state = 'rejected')::int
         AS rejected,
       (SELECT count(*) FROM ${s}.outbox_lane_approvals a
        WHERE a.state = 'expired' OR (a.state = 'awaiting' AND a.expires_at <= now()))::int
         AS expired`;

/**
 * Retention of the decisions (`pruneOutbox`, after the lanes prune): a decided row whose message
 * retention deleted (consumed, older than the cut-off, not parked) goes too, decided before the
 * same cut-off. Never one whose message is still there: the lane read needs its decision. Reads
 * the decision rows, which are as many as the held messages kept. $1 age in ms.
 */
export const pruneLaneApprovalsSql = (s: string) => `
WITH gone AS (
  DELETE FROM ${s}.outbox_lane_approvals a
  WHERE a.state <> 'awaiting'
    AND a.decided_at < now() - $1 * interval '1 millisecond'
    AND NOT EXISTS (
      SELECT 1 FROM ${s}.outbox_lane_messages m WHERE m.lane = a.lane AND m.id = a.id)
  RETURNING 1)
SELECT count(*)::int AS n FROM gone`;
