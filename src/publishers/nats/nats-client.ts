/**
 * The subset of the `nats` package (v2) the publisher calls, typed structurally so the core
 * never imports the SDK (STYLE.md, the Kysely rule). A real `NatsConnection` fits.
 */

/** JetStream's answer to a publish. `duplicate` is true when the stream dropped it by msgID. */
export interface NatsPubAckLike {
  stream: string;
  seq: number;
  duplicate: boolean;
}

/** `JetStreamClient`, publish only. */
export interface NatsJetStreamLike {
  publish(
    subject: string,
    payload: Uint8Array,
    options: { msgID?: string; timeout?: number },
  ): Promise<NatsPubAckLike>;
}

/**
 * `JetStreamManager`, stream lookup, creation and subject updates only. `update` is called only
 * on a stream the publisher created itself (see `JetStreamStream`).
 */
export interface NatsJetStreamManagerLike {
  streams: {
    info(name: string): Promise<unknown>;
    add(config: { name: string; subjects: string[]; description?: string }): Promise<unknown>;
    update(name: string, config: { subjects: string[] }): Promise<unknown>;
  };
}

/** `NatsConnection`, as far as the publisher uses it. */
export interface NatsConnectionLike {
  jetstream(): NatsJetStreamLike;
  jetstreamManager(): Promise<NatsJetStreamManagerLike>;
  isClosed(): boolean;
  close(): Promise<void>;
}

/** The module function used when the publisher connects itself. */
export interface NatsModuleLike {
  connect(options: {
    servers: string;
    user?: string;
    pass?: string;
    token?: string;
    name?: string;
    timeout?: number;
    maxReconnectAttempts?: number;
  }): Promise<NatsConnectionLike>;
}
