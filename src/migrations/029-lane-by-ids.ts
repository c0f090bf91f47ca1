import { laneByIdsFunctionSql } from '../sql/lanes.js';
import type { Migration } from './migration.js';

/**
 * The read of the messages a wake-up named, as a function (issue 43, latency): the lane
 * dispatcher sent it as a statement, and planning it was most of its round trip on the path from
 * a writer's commit to the publish (sql/lanes.ts `laneByIdsFunctionSql` has the figures). A new
 * function only: a dispatcher of the previous version keeps sending its statement.
 */
export const laneByIds: Migration = {
  version: 29,
  name: 'lane-by-ids',
  up: (s) => [laneByIdsFunctionSql(s)],
};
