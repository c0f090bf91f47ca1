import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { trace, TraceFlags } from '@opentelemetry/api';
import { ATTR_ERROR_TYPE } from '@opentelemetry/semantic-conventions';
import * as incubating from '@opentelemetry/semantic-conventions/incubating';
import { describe, expect, it } from 'vitest';
import { ATTR } from '../../../src/core/telemetry.js';
import { spanContextFromHeaders, traceHeadersOf } from '../../../src/core/trace.js';
import { startBatchTrace } from '../../../src/dispatcher/dispatch-spans.js';
import type { OutgoingMessage } from '../../../src/publishers/publisher.js';

async function sourceFiles(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { withFileTypes: true });
  const nested = await Promise.all(
    entries.map((e) => (e.isDirectory() ? sourceFiles(join(dir, e.name)) : [join(dir, e.name)])),
  );
  return nested.flat().filter((file) => file.endsWith('.ts'));
}

describe('span attribute names', () => {
  it('are the semantic conventions’ own (package @opentelemetry/semantic-conventions 1.45)', () => {
    expect({
      system: ATTR.messagingSystem,
      operationName: ATTR.messagingOperationName,
      operationType: ATTR.messagingOperationType,
      destination: ATTR.messagingDestinationName,
      messageId: ATTR.messagingMessageId,
      batchCount: ATTR.messagingBatchMessageCount,
      consumerGroup: ATTR.messagingConsumerGroupName,
      errorType: ATTR.errorType,
      genAiOperation: ATTR.genAiOperationName,
      genAiTool: ATTR.genAiToolName,
    }).toEqual({
      system: incubating.ATTR_MESSAGING_SYSTEM,
      operationName: incubating.ATTR_MESSAGING_OPERATION_NAME,
      operationType: incubating.ATTR_MESSAGING_OPERATION_TYPE,
      destination: incubating.ATTR_MESSAGING_DESTINATION_NAME,
      messageId: incubating.ATTR_MESSAGING_MESSAGE_ID,
      batchCount: incubating.ATTR_MESSAGING_BATCH_MESSAGE_COUNT,
      consumerGroup: incubating.ATTR_MESSAGING_CONSUMER_GROUP_NAME,
      errorType: ATTR_ERROR_TYPE,
      genAiOperation: incubating.ATTR_GEN_AI_OPERATION_NAME,
      genAiTool: incubating.ATTR_GEN_AI_TOOL_NAME,
    });
    expect(incubating.MESSAGING_OPERATION_TYPE_VALUE_CREATE).toBe('create');
    expect(incubating.MESSAGING_OPERATION_TYPE_VALUE_SEND).toBe('send');
    expect(incubating.MESSAGING_OPERATION_TYPE_VALUE_PROCESS).toBe('process');
    expect(incubating.MESSAGING_SYSTEM_VALUE_RABBITMQ).toBe('rabbitmq');
    expect(incubating.MESSAGING_SYSTEM_VALUE_KAFKA).toBe('kafka');
    expect(incubating.MESSAGING_SYSTEM_VALUE_AWS_SQS).toBe('aws_sqs');
  });
});

describe('the library and the OpenTelemetry SDK', () => {
  it('only the CLI imports an OpenTelemetry package other than @opentelemetry/api', async () => {
    const files = (await sourceFiles('src')).filter((f) => !f.startsWith(join('src', 'cli')));
    const offenders: string[] = [];
    for (const file of files) {
      const text = await readFile(file, 'utf8');
      for (const match of text.matchAll(/['"](@opentelemetry\/[a-z0-9-]+)/g))
        if (match[1] !== '@opentelemetry/api') offenders.push(`${file} → ${match[1]}`);
    }
    expect(offenders).toEqual([]);
  });

  it('with no SDK registered, a batch makes no span work at all', () => {
    const message = {
      id: 'm',
      rowId: '1',
      topic: 't',
      aggregateId: 'a',
      sequence: 1,
      payload: {},
      headers: { traceparent: `00-${'a'.repeat(32)}-${'b'.repeat(16)}-01` },
      createdAt: new Date(),
      attempts: 1,
    } satisfies OutgoingMessage;
    expect(startBatchTrace('d', 'd#1', [message], Date.now())).toBeUndefined();
  });
});

describe('W3C trace context headers', () => {
  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const spanId = '00f067aa0ba902b7';

  it('parses a traceparent (and tracestate) into a remote span context and back', () => {
    const parsed = spanContextFromHeaders({
      traceparent: `00-${traceId}-${spanId}-01`,
      tracestate: 'vendor=1',
    })!;
    expect(parsed).toMatchObject({
      traceId,
      spanId,
      traceFlags: TraceFlags.SAMPLED,
      isRemote: true,
    });
    expect(traceHeadersOf(parsed)).toEqual({
      traceparent: `00-${traceId}-${spanId}-01`,
      tracestate: 'vendor=1',
    });
    expect(trace.wrapSpanContext(parsed).spanContext().traceId).toBe(traceId);
  });

  it('refuses missing and invalid values', () => {
    for (const traceparent of [
      undefined,
      'garbage',
      `ff-${traceId}-${spanId}-01`,
      `00-${'0'.repeat(32)}-${spanId}-01`,
      `00-${traceId}-${'0'.repeat(16)}-01`,
      `00-${traceId}-${spanId}-01-extra`,
    ])
      expect(
        spanContextFromHeaders(traceparent === undefined ? {} : { traceparent }),
        String(traceparent),
      ).toBeUndefined();
    // A later version may carry more fields; its first four are read.
    expect(spanContextFromHeaders({ traceparent: `01-${traceId}-${spanId}-00-x` })).toMatchObject({
      traceId,
      traceFlags: TraceFlags.NONE,
    });
  });
});
