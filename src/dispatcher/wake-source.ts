/**
 * Something that tells an idle dispatcher "new work may be due" sooner than its poll interval
 * (LISTEN/NOTIFY, CDC). Always a hint: the dispatcher keeps polling, so a lost wake-up costs
 * latency, never a message.
 *
 * Protocol, so producers can skip the wake-up cost while dispatchers are busy:
 * 1. `start(wake)` once; the source calls `wake()` whenever work may have arrived, with a hint
 *    when it has one (a LISTEN source: the notification's payload; the lanes writer names the
 *    messages it wrote there, which a lanes dispatcher may publish at once: lane-dispatcher.ts).
 * 2. When a claim finds nothing, the dispatcher awaits `idle()` (arm: "notify me now"), then
 *    claims ONCE more — anything committed before arming is found by that claim — and only then
 *    sleeps until `wake()` or the poll interval.
 * 3. When a claim finds work again, it calls `busy()` (disarm) without waiting for it; a source
 *    must run `idle()` and `busy()` in call order.
 * 4. `stop()` on shutdown.
 * Errors thrown by `idle`/`busy` are reported and otherwise ignored: polling covers them.
 */
export interface WakeSource {
  start(wake: (hint?: string) => void): Promise<void>;
  idle?(): Promise<void>;
  busy?(): Promise<void>;
  stop(): Promise<void>;
}
