/**
 * The subset of `@aws-sdk/client-sqs` (v3) the publisher calls, typed structurally so the core
 * never imports the SDK (STYLE.md, the Kysely rule). A real `SQSClient` fits.
 */

/** One entry of `SendMessageBatch`. */
export interface SqsBatchEntry {
  Id: string;
  MessageBody: string;
  MessageGroupId?: string;
  MessageDeduplicationId?: string;
}

/** `SendMessageBatch` input. */
export interface SqsSendMessageBatchInput {
  QueueUrl: string;
  Entries: SqsBatchEntry[];
}

/** `SendMessageBatch` output, the fields we read. */
export interface SqsSendMessageBatchOutput {
  Successful?: { Id?: string }[];
  Failed?: { Id?: string; SenderFault?: boolean; Code?: string; Message?: string }[];
}

/** `SQSClient`, as far as the publisher uses it. */
export interface SqsClientLike {
  send(command: object): Promise<SqsSendMessageBatchOutput>;
  destroy(): void;
}

/** The module exports used by the publisher. */
export interface SqsModuleLike {
  SQSClient: new (config: Record<string, unknown>) => SqsClientLike;
  SendMessageBatchCommand: new (input: SqsSendMessageBatchInput) => object;
}
