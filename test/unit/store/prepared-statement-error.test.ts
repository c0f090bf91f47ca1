import { describe, expect, it } from 'vitest';
import { OutboxPoolerError } from '../../../src/index.js';
import {
  explainPreparedStatementError,
  PREPARED_STATEMENTS_OFF,
} from '../../../src/store/prepared-statement-error.js';

/** A driver error as `pg` and postgres.js throw them: SQLSTATE in `code`. */
const driverError = (code: string, message: string) => Object.assign(new Error(message), { code });

describe('explainPreparedStatementError', () => {
  it.each([
    ['26000', 'prepared statement "agent_outbox_0123456789abcdef" does not exist'],
    ['42P05', 'prepared statement "agent_outbox_0123456789abcdef" already exists'],
  ])('%s: an OutboxPoolerError that says what to set, the driver error as cause', (code, text) => {
    const original = driverError(code, text);
    const explained = explainPreparedStatementError(original, PREPARED_STATEMENTS_OFF('fromPg'));
    expect(explained).toBeInstanceOf(OutboxPoolerError);
    expect(explained).toMatchObject({ code: 'OUTBOX_POOLER', cause: original });
    expect((explained as Error).message).toMatch(
      new RegExp(`^${text.replace(/[()"]/g, '\\$&')}: a connection pooler in transaction mode`),
    );
    expect((explained as Error).message).toContain(
      'Pass { preparedStatements: false } to fromPg()',
    );
  });

  it('leaves every other error as it was', () => {
    for (const error of [
      driverError('23505', 'duplicate key value violates unique constraint "x"'),
      driverError('26000', 'invalid statement name'),
      new Error('prepared statement "x" does not exist'),
      'a string',
      undefined,
    ])
      expect(explainPreparedStatementError(error, 'fix')).toBe(error);
  });
});
