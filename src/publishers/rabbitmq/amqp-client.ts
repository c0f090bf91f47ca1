/**
 * The subset of `amqplib` (promise API) the publisher calls, typed structurally so the core never
 * imports the SDK (STYLE.md, the Kysely rule). A real `ChannelModel` / `ConfirmChannel` fits.
 */

/**
 * An event listener. `any[]` because Node's EventEmitter types listeners that way, and a
 * narrower parameter type here would make real channels unassignable to these interfaces.
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type AmqpListener = (...args: any[]) => void;

/** Properties set on each published message. */
export interface AmqpPublishOptions {
  persistent: boolean;
  mandatory: boolean;
  messageId: string;
  contentType: string;
  type: string;
  appId: string;
  timestamp: number;
  headers: Record<string, string>;
}

/** A message the broker handed back with `basic.return` (unroutable with `mandatory`). */
export interface AmqpReturnedMessageLike {
  fields: { replyCode?: number; replyText?: string; exchange?: string; routingKey?: string };
  properties: { messageId?: string };
}

/** `ConfirmChannel`, as far as the publisher uses it. */
export interface AmqpConfirmChannelLike {
  assertExchange(exchange: string, type: string, options: { durable: boolean }): Promise<unknown>;
  publish(
    exchange: string,
    routingKey: string,
    content: Buffer,
    options: AmqpPublishOptions,
    callback: (error: unknown) => void,
  ): boolean;
  on(event: string, listener: AmqpListener): unknown;
  once(event: string, listener: AmqpListener): unknown;
  removeListener(event: string, listener: AmqpListener): unknown;
  close(): Promise<void>;
}

/**
 * `ChannelModel` (what `amqplib.connect` resolves to), as far as the publisher uses it. Its
 * `blocked` (with the broker's reason) and `unblocked` events carry RabbitMQ's
 * `connection.blocked` / `connection.unblocked`: a memory or disk alarm.
 */
export interface AmqpConnectionLike {
  createConfirmChannel(): Promise<AmqpConfirmChannelLike>;
  on(event: string, listener: AmqpListener): unknown;
  /** Lets a publisher on a connection it was given drop its listeners when its channel closes. */
  removeListener?(event: string, listener: AmqpListener): unknown;
  close(): Promise<void>;
}

/** The module function used when the publisher connects itself. */
export interface AmqpModuleLike {
  connect(url: string, socketOptions?: { timeout?: number }): Promise<AmqpConnectionLike>;
}
