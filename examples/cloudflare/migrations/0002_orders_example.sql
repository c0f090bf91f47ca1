-- Business tables of the example Worker (the agent-outbox tables are in 0001).

CREATE TABLE IF NOT EXISTS orders (
  id             TEXT    PRIMARY KEY,
  customer_email TEXT    NOT NULL,
  total_cents    INTEGER NOT NULL CHECK (total_cents > 0),
  created_at     INTEGER NOT NULL
);

-- The per-line limit lives only here, in the database: a line over it fails the batch AFTER the
-- order and the outbox rows were written, which is how the tests show that they roll back together.
CREATE TABLE IF NOT EXISTS order_lines (
  order_id         TEXT    NOT NULL REFERENCES orders (id),
  sku              TEXT    NOT NULL,
  quantity         INTEGER NOT NULL CHECK (quantity BETWEEN 1 AND 100),
  unit_price_cents INTEGER NOT NULL CHECK (unit_price_cents > 0),
  PRIMARY KEY (order_id, sku)
);

-- Effects performed by the queue consumer (a payment provider and a mailbox, recorded in D1).
CREATE TABLE IF NOT EXISTS payments (
  message_id   TEXT    PRIMARY KEY,
  order_id     TEXT    NOT NULL,
  amount_cents INTEGER NOT NULL,
  traceparent  TEXT
);

CREATE TABLE IF NOT EXISTS mailbox (
  message_id  TEXT PRIMARY KEY,
  to_address  TEXT NOT NULL,
  subject     TEXT NOT NULL,
  traceparent TEXT
);

-- Status events in the order the consumer applied them (id = application order).
CREATE TABLE IF NOT EXISTS order_events (
  id       INTEGER PRIMARY KEY AUTOINCREMENT,
  order_id TEXT    NOT NULL,
  sequence INTEGER NOT NULL,
  status   TEXT    NOT NULL
);

-- Every delivery the queue handed to the consumer, duplicates included (what the queue saw).
CREATE TABLE IF NOT EXISTS deliveries (
  id               INTEGER PRIMARY KEY AUTOINCREMENT,
  queue_message_id TEXT    NOT NULL,
  message_id       TEXT,
  attempts         INTEGER NOT NULL,
  result           TEXT    NOT NULL
);

-- One row per scheduled dispatcher run, for operators (and the overlapping-runs test).
CREATE TABLE IF NOT EXISTS dispatch_runs (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  claimed       INTEGER NOT NULL,
  published     INTEGER NOT NULL,
  retried       INTEGER NOT NULL,
  dead_lettered INTEGER NOT NULL,
  fenced        INTEGER NOT NULL,
  stopped_by    TEXT    NOT NULL,
  finished_at   INTEGER NOT NULL
);
