import type { SqlExecutor } from '../store/sql-executor.js';
import {
  acquireOwnershipSql,
  createFleetTablesSql,
  forgetDeadMembersSql,
  heartbeatSql,
  leaveFleetSql,
  ownedByOthersSql,
  releaseOwnershipSql,
  stillOwnedSql,
} from '../sql/fleet.js';

/** How soon an under-share member looks again while another holds more than its share. */
const GIVE_BACK_POLL_MS = 250;

/** What one {@link FleetMembership.reconcile} decided. */
export interface Reconciliation {
  /** Taken by this member now: start serving them. */
  acquired: string[];
  /** Held until now, but another member holds them now (our lease ran out): stop at once. */
  lost: string[];
  /**
   * Held, but to give back: no longer discovered, or more than this member's fair share (a member
   * joined). Stop serving each, then {@link FleetMembership.release} it.
   */
  toRelease: string[];
  /** Live members, this one included. */
  members: number;
  /** When to reconcile again at the latest (a dead member's lease runs out sooner). */
  nextInMs: number;
}

/**
 * One process's place in a fleet on one server: which tenants it serves. A row per tenant in the
 * control database, held under the member's own lease (sql/fleet.ts), renewed every lease/3 by
 * one heartbeat; a member serves at most its fair
 * share, ceil(tenants / live members), so the tenants spread evenly and a member that joins gets
 * its share as the others give back their excess; a member that dies stops renewing and its
 * tenants are taken when its lease runs out.
 *
 * Correctness never rests on this: two processes serving one database for a moment (a member
 * that stalled past its lease) still cannot publish a message twice at once, since each message
 * is claimed under its own lease and settled fenced. Ownership is about cost (one process polls a
 * database, not all of them) and the connection budget.
 */
export class FleetMembership {
  readonly #control: SqlExecutor;
  readonly #member: string;
  readonly #scope: string;
  readonly #leaseMs: number;
  readonly #owned = new Set<string>();
  readonly #releasing = new Set<string>();
  #renewedAt = 0;

  constructor(options: { control: SqlExecutor; member: string; scope: string; leaseMs: number }) {
    this.#control = options.control;
    this.#member = options.member;
    this.#scope = options.scope;
    this.#leaseMs = options.leaseMs;
  }

  /** Targets this member holds (those being released included). */
  get owned(): ReadonlySet<string> {
    return this.#owned;
  }

  /** Date.now() of the last successful renewal (0: never). */
  get renewedAt(): number {
    return this.#renewedAt;
  }

  /** Creates the ownership tables if missing (idempotent, safe from several processes at once). */
  async join(): Promise<void> {
    // One simple-protocol string: one implicit transaction, whichever pooled connection runs it.
    await this.#control.query(createFleetTablesSql.join(';\n'));
    await this.#control.query(forgetDeadMembersSql);
  }

  /** Heartbeat, renewal and fair share against the tenants discovered now. */
  async reconcile(discovered: readonly string[]): Promise<Reconciliation> {
    const started = Date.now();
    const { rows: members } = await this.#control.query<{ member: string; owned: number }>(
      heartbeatSql,
      [this.#member, this.#leaseMs, this.#scope],
    );
    const live = new Set(members.map((m) => m.member));
    const targets = new Set(discovered);
    const toRelease = [...this.#owned].filter((t) => !targets.has(t) && !this.#releasing.has(t));
    const keep = [...this.#owned].filter((t) => targets.has(t) || this.#releasing.has(t));
    const { rows: renewed } = await this.#control.query<{ target: string }>(stillOwnedSql, [
      this.#scope,
      this.#member,
      keep,
    ]);
    const held = new Set(renewed.map((r) => r.target));
    const lost = keep.filter((t) => !held.has(t));
    for (const t of lost) {
      this.#owned.delete(t);
      this.#releasing.delete(t);
    }
    this.#renewedAt = started;

    const share = Math.ceil(targets.size / Math.max(1, live.size));
    const serving = [...this.#owned].filter((t) => targets.has(t) && !this.#releasing.has(t));
    const acquired: string[] = [];
    let nextInMs = this.#leaseMs / 3;
    if (serving.length > share) {
      // Give back the ones this member ranks lowest: each member ranks tenants differently
      // (rendezvous hashing), so after a rebalance a tenant tends to go back where it was.
      const excess = serving
        .sort((a, b) => this.#rank(a) - this.#rank(b))
        .slice(0, serving.length - share);
      toRelease.push(...excess);
    } else if (serving.length < share) {
      const candidates = [...targets].filter((t) => !this.#owned.has(t));
      const { rows: others } = await this.#control.query<{
        target: string;
        member: string;
        expiresInMs: number;
      }>(ownedByOthersSql, [this.#scope, this.#member, candidates]);
      const taken = new Set(others.map((o) => o.target));
      for (const o of others)
        if (!live.has(o.member)) nextInMs = Math.min(nextInMs, Math.max(50, o.expiresInMs + 50));
      // A member over its share gives its excess back at its next round, within lease/3: look
      // again soon instead of a whole round later, so a join costs a tenant a short pause.
      if (members.some((m) => m.member !== this.#member && m.owned > share))
        nextInMs = Math.min(nextInMs, GIVE_BACK_POLL_MS);
      const free = candidates
        .filter((t) => !taken.has(t))
        .sort((a, b) => this.#rank(b) - this.#rank(a))
        .slice(0, share - serving.length);
      if (free.length > 0) {
        const { rows } = await this.#control.query<{ target: string }>(acquireOwnershipSql, [
          this.#scope,
          this.#member,
          this.#leaseMs,
          free,
        ]);
        for (const { target } of rows) {
          this.#owned.add(target);
          acquired.push(target);
        }
      }
    }
    for (const t of toRelease) this.#releasing.add(t);
    return { acquired, lost, toRelease, members: live.size, nextInMs };
  }

  /** Gives targets back once they are no longer served here. */
  async release(targets: readonly string[]): Promise<void> {
    if (targets.length === 0) return;
    await this.#control.query(releaseOwnershipSql, [this.#scope, this.#member, targets]);
    for (const t of targets) {
      this.#owned.delete(t);
      this.#releasing.delete(t);
    }
  }

  /** Forgets targets locally (when the control database cannot be reached past the lease). */
  forget(): string[] {
    const all = [...this.#owned];
    this.#owned.clear();
    this.#releasing.clear();
    return all;
  }

  /** Leaves the fleet: the others count this member out at once instead of after its lease. */
  async leave(): Promise<void> {
    await this.#control.query(leaveFleetSql, [this.#member]);
    this.#owned.clear();
    this.#releasing.clear();
  }

  /** Rendezvous rank of a target for this member (FNV-1a of both names). */
  #rank(target: string): number {
    let h = 0x811c9dc5;
    const s = `${this.#member}\u0000${target}`;
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 0x01000193) >>> 0;
    }
    return h;
  }
}
