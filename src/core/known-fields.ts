import { OutboxValidationError } from './errors.js';
import { editDistance } from './edit-distance.js';
import { MESSAGE_FIELDS } from './message.js';

const KNOWN_FIELDS = new Set<string>(MESSAGE_FIELDS);

/** The known field a mistyped one was probably meant to be (`delayMS`, `requireApproval`). */
function closestField(key: string): string | undefined {
  let best: { field: string; distance: number } | undefined;
  for (const field of MESSAGE_FIELDS) {
    const distance =
      field.toLowerCase() === key.toLowerCase()
        ? 0
        : editDistance(field.toLowerCase(), key.toLowerCase());
    if (distance <= 2 && (!best || distance < best.distance)) best = { field, distance };
  }
  return best?.field;
}

/**
 * Rejects fields `OutboxMessage` does not have (SPEC §6): before, they were silently ignored, so
 * `requireApproval: true` (a typo) sent a refund that was meant to wait for a person.
 */
export function checkKnownFields(prefix: string, message: Record<string, unknown>): void {
  for (const key of Object.keys(message)) {
    if (KNOWN_FIELDS.has(key)) continue;
    const meant = closestField(key);
    throw new OutboxValidationError(
      `${prefix}.${key}`,
      `is not a message field${meant ? ` (did you mean ${meant}?)` : ''}; the fields are ${MESSAGE_FIELDS.join(', ')}`,
    );
  }
}
