import { DEFAULT_SCHEMA } from '../../core/identifier.js';
import { PUBLISHER_URL_SCHEMES } from '../../publishers/from-url.js';

/** `outbox dispatch --help`. */
export const dispatchHelp = `Usage: outbox dispatch (--publisher URL | --config FILE) [options]

Publishes committed outbox messages at least once: leases a part of the outbox (a lane of
messages on the lanes engine; due messages, FOR UPDATE SKIP LOCKED, on the claim engine),
publishes outside any transaction, records what it published if it still holds the lease. Run
as many as you like, on as many hosts: they share the work.

Options:
  --engine claims|lanes      which engine's messages to publish (default: the one the
                             schema records, outbox engine: lanes for a new schema, claims
                             for one migrated before migration 36; in fleet mode each
                             tenant's own): claims
                             publishes the outbox table (createOutbox()); lanes publishes the
                             lanes engine's (createOutbox({ engine: 'lanes' })), reading each
                             lane after its cursor under a lane lease (--lease-ms), writing
                             per batch. With lanes, --concurrency N runs N lane dispatchers
                             on disjoint lanes, and --mode cdc wakes it from the WAL instead
                             of LISTEN/NOTIFY (producers then never notify; its poll, default
                             5000 ms, stays the guarantee). Refused with exit 2:
                             --sweep-interval-ms, --async-settle, --async-claim, --claim-shape,
                             and --concurrency in fleet mode (one lane dispatcher a
                             tenant). Defaults then: --batch-size 500,
                             --poll-interval-ms 200
  --database-url URL         Postgres connection string (default: $DATABASE_URL)
  --schema NAME              schema of the outbox tables (default: ${DEFAULT_SCHEMA})
  --publisher URL            where to publish: ${PUBLISHER_URL_SCHEMES.map((s) => `${s}://`).join(', ')}
  --config FILE              route topics to several publishers: a JSON file (or outbox.config.js
                             with a default export) like
                             {"routes":[{"pattern":"mail.*","publisher":"nats://127.0.0.1:4222"},
                                        {"pattern":"payment.**","publisher":"amqp://..."}],
                              "fallback":"http://127.0.0.1:8080/outbox"}
                             ('*' = one dot-separated segment, '**' = any; first match wins;
                             unmatched topics without a fallback are dead-lettered)
  --once                     drain everything due, then exit (0 = all published, 1 = something failed)
  --mode poll|cdc            poll (default): claim on a timer, woken at once by LISTEN/NOTIFY;
                             cdc: follow the outbox's inserts over logical replication
                             (needs wal_level=logical; see docs/latency.md for the slot risks)
  --no-listen                poll mode: no LISTEN/NOTIFY wake-ups, poll only
  --listen-url URL           poll mode: connect LISTEN here, directly to Postgres, when
                             --database-url is a transaction pooler's (PgBouncer, Supavisor
                             6543, Neon -pooler: LISTEN through one hears nothing, which the
                             dispatcher checks at start; see docs/managed-postgres.md)
  --fallback-poll-ms N       poll mode with LISTEN/NOTIFY: safety-net poll interval (default 5000)
  --slot NAME                cdc mode: replication slot (created once, reused; default derived
                             from the schema)
  --publication NAME         cdc mode: publication of the outbox table (created if missing)
  --sweep-interval-ms N      cdc mode: polling sweeper interval for anything the stream missed
                             (default 30000)
  --batch-size N             messages per claim (default 200)
  --lease-ms N               exclusive claim duration; a crashed dispatcher's messages wait this
                             long before another takes them (default 30000)
  --poll-interval-ms N       wait after an empty claim (default 1000; 5000 with LISTEN/NOTIFY)
  --concurrency N            batches in flight at once (default 1)
  --async-settle             settle without waiting for the WAL flush (for slow disks); a
                             Postgres crash may then lose the last ~0.6 s of settles: those
                             messages are published again, same message id (claims wait
                             unless --async-claim; see docs/latency.md, "Commit mode")
  --async-claim              claim without waiting for the WAL flush (one flush fewer per
                             message's latency); after a Postgres crash recovery no claim
                             takes anything for --lease-ms, then lost claims' messages are
                             published again, same message id. Same on every dispatcher
  --statement-timeout-ms N   give up on a claim, settle or release (with lanes: on any
                             statement of the dispatcher) after N ms and drop its
                             connection (a network partition closes nothing: without it a
                             statement on a frozen connection waits for good); a timed-out
                             settle is like a failed one: the lease expires, the message goes
                             out again, same id. 0 = off (default 10000)
  --connect-timeout-ms N     give up on opening a database connection after N ms (pool,
                             LISTEN and replication connections; default 10000). Every
                             connection also has TCP keepalive on (first probe after 10 s idle)
  --backoff-base-ms N        delay after the first failure, doubling (default 30000)
  --backoff-max-ms N         cap of the doubling delay (default 900000)
  --backoff-jitter-ms N      random extra delay, up to (default 5000)
  --max-attempts N           attempts before dead-lettering (default 10)
  --unordered GLOB           topics without per-aggregate order, e.g. 'mail.*' (repeatable,
                             or comma-separated); all other topics are ordered. Declared in
                             the database (outbox_unordered_topics) at start: it applies to
                             messages written from then on, whichever dispatcher sends them
  --rate-limit 'GLOB=N/s[:BURST]'
                             at most N messages a second on topics matching GLOB, for all
                             dispatchers together (repeatable), e.g. 'payment.*=50/s:100'.
                             Declared in the database (outbox_rate_limits) at start; a message
                             over the limit waits without an attempt counted (outbox limits)
  --route-pause-after N      consecutive failed messages of a route (none published) that
                             pause it: its messages wait, uncharged, while one probe tells
                             when it is back (default 5; Retry-After pauses at once)
  --route-pause-max-ms N     longest pause between probes, doubling from 1000 (default 60000)
  --dead-letter-policy P     hold (default): a dead letter blocks its aggregate's later
                             ordered messages; skip: they go on
  --claim-shape S            auto (default): take a few aggregates with the messages queued
                             behind them while the destination answers in under 0.5 ms, many
                             aggregates one message each otherwise; heads-first or runs-first
                             to choose it yourself. Order holds either way
  --nats-stream NAME         nats:// only: the JetStream stream to publish into. An existing
                             stream (e.g. yours) is used as it is and never changed; a topic
                             whose subject it does not capture is dead-lettered with a
                             last_error saying so (add the subject, then outbox replay). A
                             missing stream is created (see --nats-subjects)
  --nats-subjects LIST       nats:// with --nats-stream only: subjects to create a missing
                             stream with, comma-separated or repeated, NATS wildcards allowed
                             ('orders.created,orders.*.refund,audit.>'); ignored when the
                             stream exists. Default: one subject per topic's first segment,
                             added as topics arrive (mail.send -> mail.>)
  --http-timeout-ms N        http(s):// only: request timeout (default 10000)
  --webhook-secret-file PATH http(s):// only: sign every request (Standard Webhooks:
                             webhook-id, webhook-timestamp, webhook-signature) with the
                             whsec_ secrets in PATH, one per line (two while rotating);
                             or set $OUTBOX_WEBHOOK_SECRET instead (never a flag value)
  --metrics-port N           serve Prometheus metrics on /metrics and a health check on
                             /healthz (needs prom-client; see docs/operations.md); with
                             --engine lanes the gauges read the lanes engine's tables
  --metrics-host ADDR        interface for the metrics server (default 127.0.0.1)
  --health-stall-ms N        /healthz answers 503 when messages are due and none was
                             dispatched for this long (default 300000)
  --prune-older-than DUR     also run retention in this process, e.g. 30d: delete dispatched
                             rows older than DUR every --prune-interval; one process per
                             schema prunes at a time (a lock per batch), the others skip;
                             not with --once (use outbox prune)
  --prune-archive            move pruned rows to outbox_archive (lanes: outbox_lane_archive)
                             instead of deleting them
  --prune-ledger-older-than DUR  also prune done consumer-ledger rows older than DUR (e.g. 14d)
  --prune-interval DUR       time between retention runs (default 1h)
  --log-format text|json     json: one JSON object per line (time, level, msg, fields,
                             trace_id/span_id when the line belongs to a trace), for log
                             pipelines; default text, or $OUTBOX_LOG_FORMAT
  --json                     the same as --log-format json
  -h, --help                 show this help

Fleet mode (many databases or schemas, one process, a connection budget; docs/fleet.md):
  --databases GLOB           serve every database of the server whose name matches, e.g.
                             'tenant_*' ('*' any run, '?' one character); --database-url names
                             the server and its control database (e.g. .../postgres), where
                             the fleet's ownership table lives. Found again every
                             --discover-interval: new ones are served, dropped ones let go
  --schemas GLOB             the same for schemas (with an outbox) of the --database-url database
  --database-url URL         repeat it to serve several servers
  --discover-interval DUR    how often databases/schemas are listed again (default 30s)
  --max-connections N        connections per server this process holds at most, whatever the
                             number of databases (default 10); an idle database holds none
  --idle-poll-interval DUR   look at a database no write announced this often anyway
                             (default 60s)
                             Run the same command on several hosts: each database is served
                             by one process at a time, spread evenly, taken over within
                             --lease-ms when a process dies. Polls only: no LISTEN, no CDC.
                             Each tenant by the engine its schema records (read when first
                             served), unless --engine names one; a tenant on lanes is
                             served by one lane dispatcher (--concurrency above 1 fails it)
                             and its turn drains its lanes

Environment:
  OUTBOX_WEBHOOK_SECRET      http(s):// only: whsec_ signing secret(s), space-separated (new
                             first, then the old one while rotating); a malformed one exits 2
  OUTBOX_LOG_FORMAT          text or json (see --log-format)
  OTEL_TRACES_EXPORTER       otlp (or console, none): record OpenTelemetry spans (a batch span
                             per claim, a send span per message in its message's trace) and
                             export them; on as well when an OTLP endpoint is set. Needs
                             npm install @opentelemetry/sdk-trace-node @opentelemetry/resources
                             @opentelemetry/exporter-trace-otlp-proto (-http for http/json)
  OTEL_EXPORTER_OTLP_ENDPOINT       collector base URL (default http://localhost:4318)
  OTEL_EXPORTER_OTLP_PROTOCOL       http/protobuf (default) or http/json
  OTEL_SERVICE_NAME                 default agent-outbox
  OTEL_RESOURCE_ATTRIBUTES          e.g. deployment.environment=prod
  (and the SDK's other OTEL_* variables: _TRACES_ENDPOINT, _HEADERS, _TIMEOUT,
  OTEL_TRACES_SAMPLER, OTEL_BSP_*)

Signals: SIGINT/SIGTERM stop claiming, let in-flight publishes finish (bounded by the lease)
and settle, then exit 0. A second signal exits at once (leases then expire on their own).
`;
