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

/** `MsgHdrs`: the NATS message headers, as far as the publisher writes them. */
export interface NatsHeadersLike {
  set(key: string, value: string): void;
}

/** `JetStreamClient`, publish only. */
export interface NatsJetStreamLike {
  publish(
    subject: string,
    payload: Uint8Array,
    options?: { msgID?: string; timeout?: number; headers?: NatsHeadersLike },
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
  /**
   * The connection's events (`disconnect` with the server it lost, `reconnect`, ...): the
   * publisher stops waiting for PubAcks a lost server will never send. Optional: without it
   * they run into `ackTimeoutMs`.
   */
  status?(): AsyncIterable<{ type: string; data?: unknown }>;
  close(): Promise<void>;
}

/**
 * The module functions the publisher uses: `connect` when it connects itself, `headers` to make
 * the NATS headers that carry the trace context (without it, the trace travels in the envelope
 * only).
 */
export interface NatsModuleLike {
  headers?(): NatsHeadersLike;
  connect(options: {
    /** One `host:port`, or several: the client picks one that answers and fails over. */
    servers: string | string[];
    user?: string;
    pass?: string;
    token?: string;
    name?: string;
    timeout?: number;
    maxReconnectAttempts?: number;
  }): Promise<NatsConnectionLike>;
}
