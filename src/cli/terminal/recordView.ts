/**
 * How ledger records, their history and tool results look at a terminal and in `--json`: one place, so `ls`, `show`,
 * `call`, `resume` and `demo` say the same thing the same way.
 */
import type { CallToolResult } from '@modelcontextprotocol/client';

import type { HistoryEntry, TaskRecord } from '../../client/ledger/index.js';
import type { Colors } from './output.js';
import { quoteServer, serverLine } from './serverText.js';

export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return '-';
  const abs = Math.max(0, ms);
  if (abs < 1_000) return `${Math.round(abs)}ms`;
  if (abs < 60_000) return `${(abs / 1_000).toFixed(1)}s`;
  const s = Math.floor(abs / 1_000);
  if (s < 3_600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, '0')}s`;
  if (s < 86_400) return `${Math.floor(s / 3_600)}h${String(Math.floor((s % 3_600) / 60)).padStart(2, '0')}m`;
  return `${Math.floor(s / 86_400)}d${Math.floor((s % 86_400) / 3_600)}h`;
}

export function formatAgo(at: number | undefined, now: number): string {
  return at === undefined ? '-' : `${formatDuration(now - at)} ago`;
}

/** What state a record is in, in one word: the server's status while it is a task, else the local state. */
export function stateWord(record: TaskRecord): string {
  switch (record.localState) {
    case 'tracking':
      return record.status ?? 'submitted';
    case 'detached':
      return `${record.status ?? 'submitted'} (detached)`;
    case 'terminal':
      if (record.status) return record.status;
      return record.error ? 'error' : 'result';
    default:
      return record.localState;
  }
}

export function paintState(word: string, c: Colors): string {
  if (word.startsWith('completed') || word === 'result') return c.green(word);
  if (word.startsWith('failed') || word === 'error') return c.red(word);
  if (word.startsWith('cancelled')) return c.magenta(word);
  if (word.startsWith('input_required')) return c.yellow(word);
  if (word === 'expired' || word === 'unknown-outcome') return c.red(word);
  return c.cyan(word);
}

/** The taskId, or the record id for a call that never became a task. */
export function refOf(record: TaskRecord): string {
  return record.taskId ?? record.recordId;
}

/** Which record a `--json` event is about: its taskId (null for a call that never became a task), record, tool, server. */
export function recordRef(record: TaskRecord) {
  return { taskId: record.taskId ?? null, recordId: record.recordId, tool: record.toolName, endpoint: record.endpoint };
}

/** The facts `ls --json` gives per record. */
export function recordSummary(record: TaskRecord, now: number) {
  return {
    ...recordRef(record),
    status: record.status ?? null,
    statusMessage: record.statusMessage ?? null,
    localState: record.localState,
    submittedAt: new Date(record.submittedAt).toISOString(),
    ageMs: now - record.submittedAt,
    lastPollAt: record.lastPollAt === undefined ? null : new Date(record.lastPollAt).toISOString(),
    correlationId: record.correlationId ?? null,
  };
}

/** A plain table: columns padded to their widest cell, colour applied after padding. */
export function table(
  header: readonly string[],
  rows: readonly (readonly string[])[],
  c: Colors,
  paint: (column: number, cell: string) => string = (_column, cell) => cell,
): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((row) => (row[i] ?? '').length)));
  const pad = (cells: readonly string[], painter: (column: number, cell: string) => string) =>
    cells
      .map((cell, i) => painter(i, i === cells.length - 1 ? cell : cell.padEnd(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [pad(header, (_i, cell) => c.dim(cell)), ...rows.map((row) => pad(row, paint))];
}

/** The ledger as `ls` and `demo` print it. */
export function recordTable(records: readonly TaskRecord[], c: Colors, now: number): string[] {
  const rows = records.map((r) => [
    refOf(r),
    r.toolName,
    stateWord(r),
    formatDuration(now - r.submittedAt),
    formatAgo(r.lastPollAt, now),
    r.correlationId ?? '-',
  ]);
  return table(['TASK ID', 'TOOL', 'STATUS', 'AGE', 'LAST POLL', 'CORRELATION ID'], rows, c, (column, cell) =>
    column === 2 ? paintState(cell, c) : column === 0 ? c.bold(cell) : cell,
  );
}

/** A tool result as text: each content block, then structured content as JSON. Server text is sanitized. */
export function resultLines(result: CallToolResult, c: Colors): string[] {
  const lines: string[] = [];
  for (const block of result.content ?? []) {
    const item = block as { type: string; [key: string]: unknown };
    switch (item.type) {
      case 'text':
        lines.push(quoteServer(String(item['text'] ?? ''), '  '));
        break;
      case 'image':
      case 'audio':
        lines.push(c.dim(`  [${item.type} ${serverLine(String(item['mimeType'] ?? ''))}, ${lengthOf(item['data'])}]`));
        break;
      case 'resource_link':
        lines.push(`  [link] ${serverLine(String(item['uri'] ?? ''))}`);
        break;
      case 'resource': {
        const resource = (item['resource'] ?? {}) as { uri?: unknown; text?: unknown };
        lines.push(`  [resource] ${serverLine(String(resource.uri ?? ''))}`);
        if (typeof resource.text === 'string') lines.push(quoteServer(resource.text, '    '));
        break;
      }
      default:
        lines.push(c.dim(`  [${serverLine(item.type)} content]`));
    }
  }
  if (result.structuredContent !== undefined) {
    lines.push(c.dim(`  structured: ${serverLine(JSON.stringify(result.structuredContent))}`));
  }
  return lines;
}

function lengthOf(data: unknown): string {
  return typeof data === 'string' ? `${Math.floor((data.length * 3) / 4)} bytes` : 'no data';
}

/** A record's history as a timeline, times relative to its submission. */
export function timelineLines(record: TaskRecord, history: readonly HistoryEntry[], c: Colors): string[] {
  const lines: string[] = [];
  for (const entry of history) {
    const offset = formatDuration(entry.observedAt - record.submittedAt).padStart(8);
    const word = entry.status ?? entry.localState;
    const local = entry.status && entry.localState !== 'tracking' ? c.dim(` [${entry.localState}]`) : '';
    const message = entry.statusMessage ? ` ${c.dim('·')} ${serverLine(entry.statusMessage)}` : '';
    const note = entry.note ? c.dim(` (${serverLine(entry.note)})`) : '';
    lines.push(`  ${c.dim(`+${offset.trim()}`.padStart(8))}  ${paintState(word, c)}${local}${message}${note}`);
  }
  return lines;
}
