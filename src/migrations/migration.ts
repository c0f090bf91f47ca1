/**
 * One versioned schema change. `up` receives the already-validated, double-quoted schema name and
 * returns the DDL statements to run (one per entry: some drivers, PGlite among them, run one statement per call). Migrations are append-only: a released migration is never edited — add a
 * new one instead (the schema-drift test catches an edit).
 */
export interface Migration {
  /** Strictly increasing, starting at 1. */
  version: number;
  /** Short kebab-case description, stored in the migrations table. */
  name: string;
  up(schema: string): string[];
}
