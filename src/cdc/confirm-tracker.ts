import type { Lsn } from './lsn.js';

interface Transaction {
  endLsn: Lsn;
  unresolved: Set<string>;
}

/**
 * Decides how far the replication slot may be confirmed: never past a transaction that still has
 * a row neither published nor recorded as failed/deferred. Pure, so the rule is unit-tested.
 *
 * Transactions arrive in commit order. The confirmable position is the end LSN of the last
 * transaction of the fully resolved PREFIX: one slow row holds back every later transaction's
 * confirmation (they are re-streamed after a restart and found already published — a cheap
 * check, never a duplicate publish), which is what "confirm only after everything up to it"
 * means. A keepalive's position (everything the server has sent so far) is confirmable only when
 * nothing at all is pending, including a transaction whose COMMIT has not arrived yet: that is
 * what lets the slot advance over WAL of other tables while the outbox is quiet.
 */
export class ConfirmTracker {
  #transactions: Transaction[] = [];
  #byRow = new Map<string, Transaction>();
  #confirmed: Lsn;
  #open = false;

  constructor(confirmed: Lsn) {
    this.#confirmed = confirmed;
  }

  /** The highest position that is safe to confirm so far. */
  get confirmed(): Lsn {
    return this.#confirmed;
  }

  /** Transactions received but not yet confirmable. */
  get pending(): number {
    return this.#transactions.length;
  }

  /** A BEGIN arrived: until its COMMIT, keepalives must not move the position. */
  begin(): void {
    this.#open = true;
  }

  /** A COMMIT arrived with the outbox rows the transaction inserted (possibly none). */
  commit(endLsn: Lsn, rowIds: readonly string[]): void {
    this.#open = false;
    if (endLsn <= this.#confirmed) return; // re-streamed after a reconnect, already confirmed
    const transaction: Transaction = { endLsn, unresolved: new Set(rowIds) };
    this.#transactions.push(transaction);
    for (const id of rowIds) this.#byRow.set(id, transaction);
    this.#advance();
  }

  /** The row was published, recorded as failed, or is deferred in the table. */
  resolve(rowId: string): void {
    const transaction = this.#byRow.get(rowId);
    if (!transaction) return;
    this.#byRow.delete(rowId);
    transaction.unresolved.delete(rowId);
    this.#advance();
  }

  /** The server has sent everything before `lsn`. */
  keepalive(lsn: Lsn): void {
    if (this.#open || this.#transactions.length > 0) return;
    if (lsn > this.#confirmed) this.#confirmed = lsn;
  }

  /**
   * The stream restarts at the confirmed position: what came after it will be sent again, so the
   * unconfirmed transactions are forgotten here (their rows stay candidates of the dispatcher).
   */
  reset(): void {
    this.#transactions = [];
    this.#byRow.clear();
    this.#open = false;
  }

  #advance(): void {
    while (this.#transactions.length > 0 && this.#transactions[0]!.unresolved.size === 0) {
      this.#confirmed = this.#transactions.shift()!.endLsn;
    }
  }
}
