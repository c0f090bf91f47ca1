/**
 * The claim's lane and its floor (migration 012, issue 25): claims that do not walk what a held
 * snapshot keeps from vacuum.
 *
 * The problem. The claim reads `outbox_ready_idx` (ready rows by `(available_at, id)`) from its
 * low end. A settle takes a row out of that partial index by writing a new version; the old
 * version, and its index entry, stay until vacuum removes them, and vacuum cannot remove anything
 * that died after the oldest snapshot still open (a report, `pg_dump`, an idle-in-transaction
 * session, a standby with `hot_standby_feedback`). Those entries sort first — they are the oldest
 * — so every claim walked every message dispatched since that snapshot was taken: measured, a
 * claim of 200 went from 2.0 ms to 17 ms after 100,000 messages, 89 ms after 400,000.
 *
 * The lane. Every row enters the index (becomes ready, or ready again) with `available_at` no
 * earlier than the moment it entered, read by `clock_timestamp()` AFTER its transaction has an
 * xid (the insert trigger; `outbox_lane_enter` for every UPDATE that puts a row back: the
 * settle's "next is ready", a retry's backoff, a replay, an approval). So the keys of what enters
 * grow with time, and a claim may start its scan at a FLOOR below which nothing pending is left:
 * the dead entries of everything settled before are below it and never read again.
 *
 * The floor is safe when two things hold for every key below it:
 * 1. No row with such a key is pending any more. Each claim first looks for the first pending
 *    row of the lane from the current floor (`dispatched_at IS NULL`: in flight, due, backing off
 *    or held — whatever its lease) and never moves the floor past it. This walk reads the dead
 *    entries between the old floor and that row: what was settled since the last claim (plus,
 *    while a lease is stuck, what was settled since it was taken).
 * 2. No transaction still running can write such a key: it would commit a pending row below the
 *    floor, which no claim would find. The floor never passes the SAFE time, and a time becomes
 *    safe in two steps, as PgQ's ticker does with snapshots: a claim records a pair (T, X) — T
 *    its `clock_timestamp()` before it wrote anything, X the xid it took after T. A writer that
 *    writes a key below T read its clock after it had its xid, so before T, so that xid is below
 *    X. When a later claim sees no transaction of this database with an xid below X still running
 *    (`pg_stat_activity.backend_xid`, and prepared transactions), every key below T is final: T
 *    is safe, and that claim records the next pair. Only this database's transactions count:
 *    the cluster-wide xmin would let a long transaction in another database hold the floor.
 *
 * What holds the floor back, then, is an open transaction that HAS AN XID (it wrote something)
 * and a lease that stays taken; a read-only snapshot — `pg_dump`, a REPEATABLE READ report, a
 * standby's feedback — does not, since it takes no xid. Measured in bench/cases/held-snapshot.ts.
 *
 * The floor and the pair live in sequences, not in a table: `setval` is not transactional and
 * writes no tuple version (a one-row table updated at every claim would itself pile up versions
 * under the held snapshot, and every claim would walk them). Two claims racing may set the floor
 * in either order; each value was safe when it was computed, and a floor that moves back only
 * costs a longer walk. The pair is written xid first, time second, and read time first, xid
 * second, so a reader never pairs a new time with an old xid. Values are microseconds since the
 * epoch (times) and xid8 as bigint.
 *
 * Assumption: the database server's clock does not step back (NTP slews it). A step back would
 * give new rows keys below the floor; a dispatcher moves the floor back one minute when it
 * starts ({@link resetLaneFloorSql}), and the next claims move it up again.
 */

/** The four sequences of the lane (see the module comment). */
export const laneSequencesSql = (s: string) =>
  ['outbox_lane_floor', 'outbox_lane_safe', 'outbox_lane_pair_at', 'outbox_lane_pair_xid'].map(
    (name) => `CREATE SEQUENCE IF NOT EXISTS ${s}.${name} AS bigint MINVALUE 0 START 0`,
  );

/**
 * Whether a message whose predecessor is `p_id` must still wait, walking back past predecessors
 * that LEFT the chain while pending: dead-lettered under `skip`, or rejected or expired under
 * `skip` (approvals.ts). Those can leave from the middle of a chain — a held message rejected
 * while the one before it is in flight — so "my predecessor is not a pending ordered message" is
 * not enough: its own predecessor may be. Called only for such a predecessor (the callers test
 * the common cases inline), and each step is one primary-key probe; the walk ends at the first
 * ordered (or dispatched, or unknown) one.
 */
export const pendingPredecessorFunctionSql = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_pending_predecessor(p_id bigint) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_id bigint := p_id;
  v_ordered boolean;
  v_prev bigint;
  v_pending boolean;
BEGIN
  WHILE v_id IS NOT NULL LOOP
    SELECT p.ordered, p.prev_id, p.dispatched_at IS NULL INTO v_ordered, v_prev, v_pending
    FROM ${s}.outbox p WHERE p.id = v_id;
    IF NOT FOUND OR NOT v_pending THEN
      RETURN false;
    END IF;
    IF v_ordered THEN
      RETURN true;
    END IF;
    v_id := v_prev;
  END LOOP;
  RETURN false;
END
$$`;

/**
 * The order check on a message's predecessor `prev` (an SQL expression): true when it, or one
 * before it, is still pending in the chain. One probe when the predecessor is ordered, dispatched
 * or gone; {@link pendingPredecessorFunctionSql} only past one that left the chain.
 */
export const blockedByPredecessorSql = (s: string, prev: string) => `EXISTS (
        SELECT 1
        FROM ${s}.outbox p
        WHERE p.id = ${prev}
          -- dispatched_at IS NULL, said so that no partial index matches: with the plain form,
          -- the plan the insert trigger cached on a small outbox scanned the whole of
          -- outbox_aggregate_pending_idx for the id (20,000 messages on one aggregate in one
          -- transaction: 147 s instead of 13), as claim.ts's UPDATE once did.
          AND num_nulls(p.dispatched_at) = 1
          AND (p.ordered OR ${s}.outbox_pending_predecessor(p.prev_id))
      )`;

/**
 * The first key of the advisory locks of migration 020: "aout" read as a 32-bit integer. A
 * constant, not the schema's hash: two schemas' outboxes in one database then share the keys,
 * which costs no more than any collision (below).
 */
const AGGREGATE_LOCK_CLASS = 1634694516;

/**
 * The advisory lock of an aggregate (migration 020), between a writer whose message waits behind
 * a pending one and the settle that may leave the aggregate empty (settle.ts `settleGuardSql`):
 * two 32-bit keys, {@link AGGREGATE_LOCK_CLASS} and the aggregate's hash, so it does not meet a
 * one-key (bigint) advisory lock of the application. A collision with the application's two-key
 * ones, or between two aggregates, only makes a writer wait for a settle or a settle defer, never
 * decides anything. `wait`: the writer's (held to its commit); `try`: the settle's, which returns
 * false instead of waiting.
 */
export const aggregateLockSql = (aggregate: string, mode: 'wait' | 'try') =>
  `${mode === 'try' ? 'pg_try_advisory_xact_lock' : 'pg_advisory_xact_lock'}(${AGGREGATE_LOCK_CLASS}, hashtext(${aggregate}))`;

/**
 * How many aggregates one transaction's writes take the lock of (above). Each is an entry of the
 * server's shared lock table, which holds about `max_locks_per_transaction` × `max_connections`
 * (6,400 by default) for every session together: a transaction that wrote behind pending messages
 * of 20,000 aggregates failed with "out of shared memory" (test/integration/dispatcher/
 * settle-plan.test.ts). Past this many, the transaction takes {@link writersLockSql} instead.
 */
export const GUARDED_AGGREGATES_CAP = 500;

/**
 * The writers' lock: one key for every aggregate, which a transaction past
 * {@link GUARDED_AGGREGATES_CAP} takes (exclusive, to its commit) instead of more aggregates' locks,
 * and which every settle of ordered messages tries shared (`try`) before its aggregates' own.
 * While such a transaction runs, settles cannot tell which aggregates it wrote, so they defer
 * every aggregate they would leave empty until it commits. Two such transactions take turns: the
 * second waits for the first, and if the first then waits for a counter row the second holds,
 * PostgreSQL ends one of them with a deadlock error (40P01) after `deadlock_timeout`; retry it.
 */
export const writersLockSql = (mode: 'wait' | 'try') =>
  mode === 'wait'
    ? `pg_advisory_xact_lock(${AGGREGATE_LOCK_CLASS + 1}, 0)`
    : `pg_try_advisory_xact_lock_shared(${AGGREGATE_LOCK_CLASS + 1}, 0)`;

/**
 * The insert trigger: sequence, order, head and lane key, decided while the writer holds its
 * aggregate's counter row (migration 001).
 *
 * - `prev_id` is the id of the aggregate's previous ORDERED message, kept on the counter row
 *   (`last_ordered_id`; `prev_ordered_id` only returns the old value through RETURNING, which
 *   cannot read the old row before PostgreSQL 18). A message is dispatched only after everything
 *   ordered before it left its chain, so "is anything ordered of this aggregate pending?" is "is
 *   my predecessor, or one before it that left the chain while pending, still pending?" — one
 *   primary-key probe, or a few past messages skipped ({@link blockedByPredecessorSql}). Before, the trigger asked it of `outbox_chain_idx`, which under a held
 *   snapshot walked every dead entry of the aggregate: a hot aggregate's inserts got slower with
 *   every message dispatched since the snapshot.
 * - `available_at`: a ready row enters the lane (see the module comment), after the counter
 *   upsert gave the transaction its xid.
 * - The aggregate's advisory lock (migration 020, {@link aggregateLockSql}), taken when the probe
 *   finds the predecessor pending, after which the probe is asked again, and held to the commit:
 *   the settle that may empty the aggregate tries it (settle.ts `settleGuardSql`), so the two
 *   never miss each other. A message that is the head at once has nothing to miss, nor has one
 *   behind a message of its own transaction (a batch on one aggregate: 0.97 ms a transaction of two
 *   messages with the lock, 0.89 without, 0.91 before 020; median of alternated blocks). Under
 *   REPEATABLE READ or SERIALIZABLE, a message not made the head also locks what its probe read
 *   as pending (FOR KEY SHARE), so that a settle committed after its snapshot fails it with a
 *   serialization error (as the counter row's update did before 020). A KEY SHARE lock fails
 *   only on a row deleted (or its key changed) since the snapshot, not on one leased since
 *   (checked in psql, PostgreSQL 15), so a claim of that message does not fail the writer.
 *
 * `enable_seqscan = off` as since migration 009: the plan PL/pgSQL caches stays a probe; `jit =
 * off` because a plan with a disabled node costs over `jit_above_cost` (see claim.ts).
 */
export const insertTriggerFunctionSql = (s: string) => `
CREATE OR REPLACE FUNCTION ${s}.outbox_before_insert() RETURNS trigger
LANGUAGE plpgsql
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
  v_prev bigint;
  v_at bigint;
  v_guarded int;
BEGIN
  IF NEW.ordered IS NULL THEN
    NEW.ordered := NOT EXISTS (
      SELECT 1 FROM ${s}.outbox_unordered_topics u WHERE NEW.topic LIKE u.pattern);
  END IF;
  -- Always assigned here, never taken from the INSERT: a caller-chosen sequence could collide.
  -- The counter row stays locked until the writer commits: writers of one aggregate serialise.
  INSERT INTO ${s}.outbox_aggregates AS a (aggregate_id, last_sequence, last_ordered_id)
  VALUES (NEW.aggregate_id, 1, CASE WHEN NEW.ordered THEN NEW.id END)
  ON CONFLICT (aggregate_id) DO UPDATE
    SET last_sequence = a.last_sequence + 1,
        prev_ordered_id = CASE WHEN NEW.ordered THEN a.last_ordered_id ELSE a.prev_ordered_id END,
        last_ordered_id = CASE WHEN NEW.ordered THEN NEW.id ELSE a.last_ordered_id END
  RETURNING a.last_sequence, a.prev_ordered_id INTO NEW.sequence, v_prev;
  NEW.headers := coalesce(NEW.headers, '{}'::jsonb);
  NEW.attempts := coalesce(NEW.attempts, 0);
  IF NEW.ordered THEN
    NEW.prev_id := v_prev;
    -- The head of its aggregate when its predecessor is not pending (this statement runs with a
    -- fresh snapshot, after the counter row was locked: see settle.ts).
    NEW.ready := v_prev IS NULL OR NOT ${blockedByPredecessorSql(s, 'v_prev')};
    -- Behind a message this transaction wrote itself: nobody can claim it before this commits,
    -- and then the two are seen together (the enqueue of a batch on one aggregate).
    IF NOT NEW.ready AND NOT EXISTS (
      SELECT 1 FROM ${s}.outbox p
      WHERE p.id = v_prev AND p.ordered AND p.xmin = xid(pg_current_xact_id())
    ) THEN
      -- Behind a pending message: a settle may be emptying the aggregate right now, or may later
      -- (settle.ts settleGuardSql). Take the aggregate's lock (waiting for such a settle) and ask
      -- again; holding it to the commit makes a later settle defer. Past ${GUARDED_AGGREGATES_CAP} aggregates in one
      -- transaction, the writers' lock instead (see writersLockSql).
      v_guarded := coalesce(nullif(current_setting('agent_outbox.guarded_aggregates', true), ''), '0')::int;
      IF current_setting('agent_outbox.guarded_last', true) IS NOT DISTINCT FROM NEW.aggregate_id THEN
        NULL; -- this transaction holds it already (a batch is sorted by aggregate)
      ELSIF v_guarded < ${GUARDED_AGGREGATES_CAP} THEN
        PERFORM ${aggregateLockSql('NEW.aggregate_id', 'wait')};
        PERFORM set_config('agent_outbox.guarded_aggregates', (v_guarded + 1)::text, true);
        PERFORM set_config('agent_outbox.guarded_last', NEW.aggregate_id, true);
      ELSE
        PERFORM ${writersLockSql('wait')};
      END IF;
      NEW.ready := NOT ${blockedByPredecessorSql(s, 'v_prev')};
    END IF;
    -- Under REPEATABLE READ or SERIALIZABLE the probe read the transaction's snapshot, which may
    -- predate a settle that emptied the aggregate: lock what it found pending, up to the first
    -- ordered message, so that a row deleted since then fails to serialise and the writer
    -- retries instead of leaving its message behind a message that is gone.
    IF NOT NEW.ready AND current_setting('transaction_isolation') <> 'read committed' THEN
      v_at := v_prev;
      WHILE v_at IS NOT NULL LOOP
        SELECT CASE WHEN p.ordered THEN NULL ELSE p.prev_id END INTO v_at
        FROM ${s}.outbox p
        WHERE p.id = v_at AND num_nulls(p.dispatched_at) = 1
        FOR KEY SHARE;
      END LOOP;
    END IF;
  ELSE
    NEW.prev_id := NULL;
    NEW.ready := true;
  END IF;
  IF NEW.ready THEN
    NEW.available_at := greatest(NEW.available_at, clock_timestamp());
  END IF;
  RETURN NEW;
END
$$`;

/**
 * A row that comes back into the lane gets a key no earlier than now (see the module comment):
 * marked ready by a settle or a repair, retried after a backoff, replayed, approved. The WHEN
 * clause is evaluated without calling the function, so claims (lease columns), settles
 * (`dispatched_at`) and every other update pay nothing. `pg_current_xact_id()` first: the key
 * must be read after the transaction has its xid, and a BEFORE trigger may run before the
 * statement wrote anything.
 */
export const laneEnterTriggerSql = (s: string) => [
  `
CREATE OR REPLACE FUNCTION ${s}.outbox_lane_enter() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_current_xact_id();
  NEW.available_at := greatest(NEW.available_at, clock_timestamp());
  RETURN NEW;
END
$$`,
  `
CREATE TRIGGER outbox_lane_enter BEFORE UPDATE ON ${s}.outbox
  FOR EACH ROW
  WHEN (NEW.ready AND NEW.dispatched_at IS NULL AND NEW.dead_lettered_at IS NULL
        AND (NOT OLD.ready OR OLD.dead_lettered_at IS NOT NULL
             OR NEW.available_at IS DISTINCT FROM OLD.available_at))
  EXECUTE FUNCTION ${s}.outbox_lane_enter()`,
];

/** How far back a starting dispatcher moves the floor: one minute, in microseconds. */
const CLOCK_STEP_COVERED_US = 60_000_000;

/**
 * Moves the floor one minute back: a dispatcher runs it once when it starts, so a server clock
 * that stepped back by up to that much (see the module comment) costs one longer claim, not a
 * lost message; the next claims move the floor up again. Not further: under a held snapshot the
 * first claim of a starting dispatcher walks what was dispatched in that span (ten minutes, in
 * the first version of this: a 20,000 backlog beside 1,000,000 messages dispatched under a held
 * snapshot drained at 0.63 of its speed without, the first claim taking seconds).
 */
export const resetLaneFloorSql = (s: string) => `
SELECT setval('${s}.outbox_lane_floor',
              greatest(last_value - ${CLOCK_STEP_COVERED_US}, 0), true) AS floor
FROM ${s}.outbox_lane_floor`;

/** Where the floor stands (tests and `outbox status`): the time below which claims do not read. */
export const laneFloorSql = (s: string) => `
SELECT timestamptz 'epoch' + f.last_value * interval '1 microsecond' AS floor,
       timestamptz 'epoch' + sf.last_value * interval '1 microsecond' AS safe
FROM ${s}.outbox_lane_floor f, ${s}.outbox_lane_safe sf`;
