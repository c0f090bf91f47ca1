import { describe, expect, it } from 'vitest';
import { createOutbox } from '../../../src/index.js';
import { claimSql } from '../../../src/sql/claim.js';
import { PgOutboxStore } from '../../../src/dispatcher/pg-outbox-store.js';
import { settleAdvanceSql, settleFailedSql } from '../../../src/sql/settle.js';
import { insertMessagesSql } from '../../../src/sql/insert-messages.js';
import { preparable, statementName } from '../../../src/store/statement-name.js';
import { quoteIdentifier } from '../../../src/core/identifier.js';

describe('prepared statement names', () => {
  it("the writer's INSERT is prepared under a stable name once a writer exists", () => {
    createOutbox({ schema: 'billing' });
    const name = statementName(insertMessagesSql(quoteIdentifier('billing')));
    expect(name).toMatch(/^agent_outbox_[0-9a-f]{16}$/);
    expect(statementName(insertMessagesSql(quoteIdentifier('billing')))).toBe(name);
    expect(statementName(insertMessagesSql(quoteIdentifier('other_schema')))).toBeUndefined();
  });

  it('neither the claim nor the settle is prepared: a generic plan made on a small outbox can be a sequential scan', () => {
    new PgOutboxStore({ query: async () => ({ rows: [] }) }, { schema: 'public' });
    expect(statementName(claimSql(quoteIdentifier('public')))).toBeUndefined();
    expect(statementName(settleFailedSql(quoteIdentifier('public')))).toBeUndefined();
    expect(statementName(settleFailedSql(quoteIdentifier('public'), 'async'))).toBeUndefined();
    expect(statementName(settleAdvanceSql(quoteIdentifier('public')))).toBeUndefined();
  });

  it('different texts get different names', () => {
    const a = statementName(preparable('SELECT $1::int AS a'));
    const b = statementName(preparable('SELECT $1::int AS b'));
    expect(a).toBeDefined();
    expect(a).not.toBe(b);
  });
});
