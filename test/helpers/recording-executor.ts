import type { QueryOptions, SqlExecutor } from '../../src/store/sql-executor.js';

/** One statement run through {@link recordingExecutor}. */
export interface RecordedCall {
  /** The statement's text, whitespace squeezed. */
  text: string;
  /** The statement's text as it was sent. */
  sent: string;
  values: readonly unknown[] | undefined;
  /** `performance.now()` when it was sent, and when it settled (undefined while it runs). */
  start: number;
  end?: number;
  /** How many rows it returned (once it has). */
  rows?: number;
  /** It rejected. */
  failed: boolean;
}

/**
 * An executor that runs each statement through `inner` and records it (`calls`, in the order they
 * were sent): what a dispatcher ran, when, what came back. The lanes tests use it to see which
 * reads stood between a commit and its publish.
 */
export function recordingExecutor(inner: SqlExecutor): {
  executor: SqlExecutor;
  calls: RecordedCall[];
} {
  const calls: RecordedCall[] = [];
  const executor: SqlExecutor = {
    query: async <Row>(text: string, values?: readonly unknown[], options?: QueryOptions) => {
      const call: RecordedCall = {
        text: text.replace(/\s+/g, ' ').trim(),
        sent: text,
        values,
        start: performance.now(),
        failed: false,
      };
      calls.push(call);
      try {
        const result = await inner.query<Row>(text, values, options);
        call.rows = result.rows.length;
        return result;
      } catch (error) {
        call.failed = true;
        throw error;
      } finally {
        call.end = performance.now();
      }
    },
  };
  return { executor, calls };
}
