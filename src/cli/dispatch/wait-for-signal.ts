import type { Log } from '../log.js';
import { EXIT } from '../usage-error.js';

/**
 * Resolves on the first SIGINT or SIGTERM (a dispatcher then finishes or releases its in-flight
 * work); a second signal exits at once — leases expire on their own, nothing is lost.
 */
export function waitForSignal(log: Log): Promise<void> {
  return new Promise((resolve) => {
    const onSignal = (signal: NodeJS.Signals) => {
      log('info', `received ${signal}`);
      process.off('SIGINT', onSignal);
      process.off('SIGTERM', onSignal);
      const force = () => process.exit(EXIT.failure);
      process.once('SIGINT', force);
      process.once('SIGTERM', force);
      resolve();
    };
    process.on('SIGINT', onSignal);
    process.on('SIGTERM', onSignal);
  });
}
