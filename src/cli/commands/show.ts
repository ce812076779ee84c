/**
 * `closeout show TASK_ID`: one ledger record (docs/REQUIREMENTS.md S6, S15): what was called, where it stands, its
 * status history as a timeline, its input requests and answers, and its result or error. `--refresh` asks the server
 * first.
 */
import type { CallToolResult } from '@modelcontextprotocol/client';
import type { Command } from 'commander';

import { TaskClientError } from '../../client/errors.js';
import type { TaskRecord } from '../../client/ledger/index.js';
import { isFollowable } from '../../client/ledger/index.js';
import type { JsonFlags, LedgerFlags } from '../commonOptions.js';
import { addJsonOption, addLedgerOption, addTaskIdArgument } from '../commonOptions.js';
import { commandContext } from '../context.js';
import { ClientSession, unknownTask } from '../session.js';
import { explain } from '../terminal/explain.js';
import type { Output } from '../terminal/output.js';
import {
  formatAgo,
  formatDuration,
  paintState,
  resultLines,
  stateWord,
  timelineLines,
} from '../terminal/recordView.js';
import { quoteServer, serverLine } from '../terminal/serverText.js';

interface ShowFlags extends JsonFlags, LedgerFlags {
  refresh?: boolean;
}

export function registerShow(program: Command): void {
  const command = program
    .command('show')
    .description('Show a task from the ledger: its record, status history as a timeline, inputs, result or error')
    .option('--refresh', 'ask the server for the task’s current status first (tasks/get) and record it');
  addTaskIdArgument(command, 'a taskId (or a unique prefix of one), a record id or an idempotency key');
  addLedgerOption(command);
  addJsonOption(command, 'print one JSON document: {"record", "history", "refreshed"}');
  command.action(async (ref: string, flags: ShowFlags) => {
    const { out, ledgerLocation, ledgerPath } = commandContext(flags);
    const session = await ClientSession.openExisting({ ledgerPath: ledgerLocation });
    if (!session) throw unknownTask(ref, ledgerPath);
    try {
      let record = await session.require(ref);
      let refresh: Refreshed | undefined;
      if (flags.refresh) {
        const local = record;
        // a server that cannot be asked still leaves the ledger's record to show, saying why it is not fresh
        refresh = await refreshRecord(session, record).catch((error: unknown) => ({
          record: local,
          refreshed: false,
          note: `the server could not be asked: ${(explain(error, { ledgerPath, endpoint: local.endpoint }) as Error).message}`,
        }));
        record = refresh.record;
      }
      const history = await session.ledger.history(record.recordId);
      out.event({
        ledger: ledgerPath,
        refreshed: refresh?.refreshed ?? false,
        note: refresh?.note ?? null,
        record,
        history,
      });
      printRecord(out, record, history, refresh, session.ledger.now());
    } finally {
      await session.close();
    }
  });
}

export interface Refreshed {
  record: TaskRecord;
  /** The server answered a tasks/get in this process. */
  refreshed: boolean;
  note: string | undefined;
}

/**
 * Query a task once from this process (S7, S12): take it up from the ledger, record what `tasks/get` says, and let it
 * go again, so a fresh process proves it can resume the handle. A task another live process follows is left alone.
 */
export async function refreshRecord(session: ClientSession, record: TaskRecord): Promise<Refreshed> {
  if (!record.taskId) return { record, refreshed: false, note: 'not a task: nothing to ask the server' };
  const client = await session.client(record.endpoint);
  const started = Date.now();
  if (isFollowable(record.localState)) {
    let handle;
    try {
      handle = await client.attach(record.recordId);
    } catch (error) {
      if (error instanceof TaskClientError && error.code === 'leased-elsewhere') {
        return { record, refreshed: false, note: `another process follows it (${record.leaseHolder ?? 'unknown'})` };
      }
      throw error;
    }
    await client.refresh(record.recordId);
    if (isFollowable(handle.localState)) await handle.detach();
  } else {
    await client.refresh(record.recordId);
  }
  const after = (await session.ledger.get(record.recordId)) ?? record;
  const failed = after.lastError !== undefined && after.lastError.at >= started;
  return {
    record: after,
    refreshed: !failed,
    note: failed ? `the server could not be queried: ${after.lastError?.message}` : undefined,
  };
}

function printRecord(
  out: Output,
  record: TaskRecord,
  history: Awaited<ReturnType<ClientSession['ledger']['history']>>,
  refresh: Refreshed | undefined,
  /** On the ledger's clock, which the record's times are on. */
  now: number,
): void {
  const c = out.c;
  const field = (name: string, value: string) => out.line(`  ${c.dim(name.padEnd(12))}${value}`);
  out.line(`${c.bold(record.taskId ? `task ${record.taskId}` : `record ${record.recordId}`)}`);
  field('tool', record.toolName);
  field('server', record.endpoint);
  const local =
    record.localState === 'detached' ? 'detached: no process follows it' : `local state ${record.localState}`;
  field('status', `${paintState(record.status ?? stateWord(record), c)} ${c.dim(`(${local})`)}`);
  if (record.statusMessage) field('message', serverLine(record.statusMessage));
  field('arguments', JSON.stringify(record.arguments));
  if (record.correlationId) field('correlation', record.correlationId);
  if (record.idempotencyKey) field('idempotency', record.idempotencyKey);
  field('record', record.recordId);
  field('submitted', `${new Date(record.submittedAt).toISOString()} (${formatAgo(record.submittedAt, now)})`);
  if (record.createdAt) field('created', `${record.createdAt} ${c.dim('(server time)')}`);
  if (record.taskId) {
    const every =
      record.pollIntervalMs === undefined ? 'no interval given' : `every ${formatDuration(record.pollIntervalMs)}`;
    const ttl = record.ttlMs === null ? 'unlimited' : record.ttlMs === undefined ? '-' : formatDuration(record.ttlMs);
    field('polling', `${every} · last ${formatAgo(record.lastPollAt, now)} · ttl ${ttl}`);
  }
  if (record.cancelRequestedAt) field('cancel', `requested ${formatAgo(record.cancelRequestedAt, now)}`);
  if (record.leaseHolder && isFollowable(record.localState)) field('followed by', record.leaseHolder);
  if (record.lastError)
    field(
      'last error',
      `${record.lastError.kind}: ${serverLine(record.lastError.message)} (${formatAgo(record.lastError.at, now)})`,
    );
  if (record.terminalReason)
    field('closed out', `${serverLine(record.terminalReason)} (${formatAgo(record.terminalAt, now)})`);
  if (record.supersededBy) field('resubmitted', `as ${record.supersededBy}`);
  if (refresh)
    field(
      'refresh',
      refresh.refreshed ? c.green('the server answered tasks/get just now') : c.yellow(refresh.note ?? 'not refreshed'),
    );
  out.line(c.bold('timeline'));
  for (const line of timelineLines(record, history, c)) out.line(line);
  if (record.inputs.length > 0) {
    out.line(c.bold('inputs'));
    for (const input of record.inputs) {
      const params = (input.request.params ?? {}) as { message?: unknown };
      out.line(`  ${serverLine(input.key)} ${c.dim(`(${input.request.method})`)}`);
      if (typeof params.message === 'string') out.line(quoteServer(params.message, '    │ '));
      const answer = input.response
        ? `answered ${serverLine(JSON.stringify(input.response))}${input.sentAt ? c.dim(` · sent ${formatAgo(input.sentAt, now)}`) : c.yellow(' · not sent yet')}`
        : c.yellow('not answered');
      out.line(`    ${answer}`);
    }
  }
  if (record.result) {
    out.line(c.bold('result'));
    for (const line of resultLines(record.result as CallToolResult, c)) out.line(line);
  }
  if (record.error) {
    out.line(c.bold('error'));
    out.line(`  ${record.error.code} ${serverLine(record.error.message)}`);
    if (record.error.data !== undefined) out.line(c.dim(`  data: ${serverLine(JSON.stringify(record.error.data))}`));
  }
}
