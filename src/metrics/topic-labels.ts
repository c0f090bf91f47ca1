/** Label value used for topics beyond the cap. */
export const OTHER_TOPIC = 'other';

/**
 * Bounds the `topic` label. Every distinct label value is a separate time series in Prometheus;
 * topics usually are a handful of fixed names, but one built from user data (`order.<id>`) would
 * create a series per message and exhaust the server. The first `maxTopics` topics seen keep
 * their name; later ones are reported as `other`.
 */
export class TopicLabels {
  readonly #seen = new Set<string>();
  readonly #max: number;

  constructor(maxTopics: number) {
    this.#max = maxTopics;
  }

  /** The label value for `topic`. */
  label(topic: string): string {
    if (this.#seen.has(topic)) return topic;
    if (this.#seen.size >= this.#max) return OTHER_TOPIC;
    this.#seen.add(topic);
    return topic;
  }
}
