/**
 * How a server store's tasks look at a terminal and in `--json` (`closeout tasks`, `closeout task show`): times as ISO
 * 8601 in JSON, every text a handler or caller chose made safe for a terminal.
 */
import type { CallToolResult } from '@modelcontextprotocol/client';

import { TASK_STATUSES } from '../../protocol/status.js';
import { parseTraceparent } from '../../protocol/traceContext.js';
import type { TaskCounts, TaskSummary } from '../../server/store/listing/query.js';
import type { StoredTask, TaskSteps } from '../../server/store/taskStore.js';
import type { Colors } from './output.js';
import { formatAgo, formatDuration, paintState, resultLines, table } from './recordView.js';
import { quoteServer, serverLine } from './serverText.js';

function iso(at: number | undefined): string | null {
  return at === undefined ? null : new Date(at).toISOString();
}

/** A listed task in `closeout tasks --json`. */
export function summaryJson(task: TaskSummary) {
  return {
    taskId: task.taskId,
    toolName: task.toolName,
    status: task.status,
    statusMessage: task.statusMessage ?? null,
    principal: task.principal,
    createdAt: iso(task.createdAt),
    lastUpdatedAt: iso(task.lastUpdatedAt),
    ttlMs: task.ttlMs,
    attempt: task.attempt,
    cancelRequested: task.cancelRequested,
    leaseHolder: task.leaseHolder ?? null,
    leaseExpiresAt: iso(task.leaseExpiresAt),
  };
}

/** The listing as a table: newest first, as the store pages it. */
export function summaryTable(tasks: readonly TaskSummary[], c: Colors, now: number): string[] {
  const rows = tasks.map((task) => [
    serverLine(task.taskId),
    serverLine(task.toolName),
    task.status,
    serverLine(task.principal),
    formatDuration(now - task.createdAt),
    String(task.attempt),
    task.statusMessage === undefined ? '' : serverLine(task.statusMessage),
  ]);
  return table(['TASK ID', 'TOOL', 'STATUS', 'PRINCIPAL', 'AGE', 'ATTEMPT', 'MESSAGE'], rows, c, (column, cell) =>
    column === 2 ? paintState(cell, c) : column === 0 ? c.bold(cell) : column === 6 ? c.dim(cell) : cell,
  );
}

/** `working 2 · input_required 0 · ...`, every status in the machine's order. */
export function countsLine(counts: TaskCounts, c: Colors): string {
  return TASK_STATUSES.map((status) => `${paintState(status, c)} ${counts[status]}`).join(c.dim(' · '));
}

/** A stored task in full, in `closeout task show --json`. */
export function detailJson(task: StoredTask, steps: TaskSteps) {
  return {
    ...summaryJson(task),
    arguments: task.arguments,
    pollIntervalMs: task.pollIntervalMs,
    resumable: task.resumable,
    idempotencyKey: task.idempotencyKey ?? null,
    fence: task.fence,
    traceId: traceIdOf(task) ?? null,
    inputs: task.inputs.map((input) => ({
      key: input.key,
      request: input.request,
      response: input.response ?? null,
      requestedAt: iso(input.requestedAt),
      answeredAt: iso(input.answeredAt),
    })),
    steps: steps.steps.map((step) => ({
      name: step.name,
      result: step.result ?? null,
      committedAt: iso(step.committedAt),
    })),
    checkpoint: steps.checkpoint ?? null,
    result: task.result ?? null,
    error: task.error ?? null,
  };
}

/** The trace id of the `tools/call` that created the task, which every run of its handler joins. */
function traceIdOf(task: StoredTask): string | undefined {
  return parseTraceparent(task.traceContext?.traceparent)?.traceId;
}

/** A stored task in full, for a person. */
export function detailLines(task: StoredTask, steps: TaskSteps, c: Colors, now: number): string[] {
  const lines: string[] = [];
  const field = (name: string, value: string) => lines.push(`  ${c.dim(name.padEnd(12))}${value}`);
  const at = (time: number) => `${new Date(time).toISOString()} ${c.dim(`(${formatAgo(time, now)})`)}`;
  lines.push(c.bold(`task ${serverLine(task.taskId)}`));
  field('tool', serverLine(task.toolName));
  field('status', paintState(task.status, c) + (task.cancelRequested ? c.yellow(' (cancel requested)') : ''));
  if (task.statusMessage !== undefined) field('message', serverLine(task.statusMessage));
  field('principal', serverLine(task.principal));
  field('arguments', serverLine(JSON.stringify(task.arguments)));
  field('created', at(task.createdAt));
  field('updated', at(task.lastUpdatedAt));
  field('ttl', task.ttlMs === null ? 'unlimited' : formatDuration(task.ttlMs));
  if (task.idempotencyKey !== undefined) field('idempotency', serverLine(task.idempotencyKey));
  field('attempt', `${task.attempt} ${c.dim(`(fence ${task.fence})`)}`);
  if (task.leaseHolder !== undefined && task.leaseExpiresAt !== undefined) {
    const until =
      task.leaseExpiresAt > now
        ? `until ${new Date(task.leaseExpiresAt).toISOString()}`
        : c.yellow(`expired ${formatAgo(task.leaseExpiresAt, now)}`);
    field('lease', `${serverLine(task.leaseHolder)} ${c.dim(until)}`);
  }
  const traceId = traceIdOf(task);
  if (traceId !== undefined) field('trace', serverLine(traceId));
  if (task.inputs.length > 0) {
    lines.push(c.bold('inputs'));
    for (const input of task.inputs) {
      const params = (input.request.params ?? {}) as { message?: unknown };
      lines.push(
        `  ${serverLine(input.key)} ${c.dim(`(${input.request.method}, ${formatAgo(input.requestedAt, now)})`)}`,
      );
      if (typeof params.message === 'string') lines.push(quoteServer(params.message, '    │ '));
      lines.push(
        input.response === undefined
          ? `    ${c.yellow('not answered')}`
          : `    answered ${serverLine(JSON.stringify(input.response))} ${c.dim(formatAgo(input.answeredAt, now))}`,
      );
    }
  }
  if (steps.steps.length > 0 || steps.checkpoint !== undefined) {
    lines.push(c.bold('steps'));
    for (const step of steps.steps) {
      const result = step.result === undefined ? c.dim('(no result)') : serverLine(JSON.stringify(step.result));
      lines.push(`  ${serverLine(step.name)} ${c.dim(formatAgo(step.committedAt, now))}  ${result}`);
    }
    if (steps.checkpoint !== undefined)
      lines.push(`  ${c.dim('checkpoint')} ${serverLine(JSON.stringify(steps.checkpoint))}`);
  }
  if (task.result !== undefined) {
    lines.push(c.bold('result'));
    lines.push(...resultLines(task.result as CallToolResult, c));
  }
  if (task.error !== undefined) {
    lines.push(c.bold('error'));
    lines.push(`  ${task.error.code} ${serverLine(task.error.message)}`);
    if (task.error.data !== undefined) lines.push(c.dim(`  data: ${serverLine(JSON.stringify(task.error.data))}`));
  }
  return lines;
}
