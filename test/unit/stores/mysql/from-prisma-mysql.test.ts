import { describe, expect, it } from 'vitest';
import { expandLists } from '../../../../src/stores/mysql/from-prisma-mysql.js';

/** How fromPrismaMysql() turns mysql2's `IN (?)` with an array into what Prisma binds. */
describe('expandLists', () => {
  it('gives each element of an array value a placeholder of its own, in order', () => {
    expect(expandLists('SELECT ? FROM t WHERE a IN (?) AND b = ?', [1, ['x', 'y'], 2])).toEqual([
      'SELECT ? FROM t WHERE a IN (?, ?) AND b = ?',
      [1, 'x', 'y', 2],
    ]);
  });

  it('leaves the text alone when no value is an array', () => {
    expect(expandLists('SELECT ?', [1])).toEqual(['SELECT ?', [1]]);
  });

  it('skips a ? in strings, quoted identifiers and comments', () => {
    const sql =
      "SELECT 'it''s ?', 'a\\'?', \"?\", `?`, ? -- ?\n, ? # ?\n /* ? */ FROM t WHERE id IN (?)";
    expect(expandLists(sql, [1, 2, [3, 4]])).toEqual([
      "SELECT 'it''s ?', 'a\\'?', \"?\", `?`, ? -- ?\n, ? # ?\n /* ? */ FROM t WHERE id IN (?, ?)",
      [1, 2, 3, 4],
    ]);
  });

  it('an empty list matches nothing (NULL), and a nested one is refused', () => {
    expect(expandLists('SELECT 1 IN (?)', [[]])).toEqual(['SELECT 1 IN (NULL)', []]);
    expect(() => expandLists('INSERT INTO t VALUES ?', [[[1, 2]]])).toThrow(/nested arrays/);
  });
});
