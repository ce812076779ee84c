/**
 * `closeout ls`: the ledger's open tasks (every record with `--all`): taskId, tool, status, age, last poll and
 * correlation id (docs/REQUIREMENTS.md S6), as the ledger knows them; nothing is sent to any server.
 */
import type { Command } from 'commander';

import type { LocalState, TaskRecord } from '../../client/ledger/index.js';
import type { JsonFlags, LedgerFlags } from '../commonOptions.js';
import { addJsonOption, addLedgerOption } from '../commonOptions.js';
import { commandContext } from '../context.js';
import { ClientSession } from '../session.js';
import { recordSummary, recordTable } from '../terminal/recordView.js';

/** Records that are not closed out: a submission in flight, a task followed here or elsewhere, a detached one. */
export const OPEN_STATES: readonly LocalState[] = ['submitting', 'tracking', 'detached'];

interface LsFlags extends JsonFlags, LedgerFlags {
  all?: boolean;
}

export function registerLs(program: Command): void {
  const command = program
    .command('ls')
    .description('List the open tasks in the ledger (every record with --all)')
    .option('--all', 'include closed records: completed, failed, cancelled, expired, unknown outcome, plain results');
  addLedgerOption(command);
  addJsonOption(command, 'print one JSON document: {"ledger", "tasks": [...]}');
  command.action(async (flags: LsFlags) => {
    const { out, ledgerLocation, ledgerPath } = commandContext(flags);
    const session = await ClientSession.openExisting({ ledgerPath: ledgerLocation });
    if (!session) {
      // a mistyped --ledger must not read as an empty ledger (resume says the same)
      out.event({ ledger: ledgerPath, exists: false, all: flags.all === true, tasks: [] });
      out.line(`no ledger at ${ledgerPath} yet: \`closeout call\` creates it`);
      return;
    }
    let records: TaskRecord[] = [];
    let closed = 0;
    try {
      const all = await session.ledger.list();
      records = flags.all ? all : all.filter((r) => OPEN_STATES.includes(r.localState));
      closed = all.length - all.filter((r) => OPEN_STATES.includes(r.localState)).length;
    } finally {
      await session.close();
    }
    // ages on the ledger's clock, which its times are on (the database's for a PostgreSQL ledger)
    const now = session.ledger.now();
    out.event({
      ledger: ledgerPath,
      exists: true,
      all: flags.all === true,
      tasks: records.map((r) => recordSummary(r, now)),
    });
    if (records.length === 0) {
      const hint = !flags.all && closed > 0 ? ` (${closed} closed: \`closeout ls --all\`)` : '';
      out.line(`no ${flags.all ? '' : 'open '}tasks in ${ledgerPath}${hint}`);
      return;
    }
    for (const line of recordTable(records, out.c, now)) out.line(line);
    const hint = flags.all ? '' : closed > 0 ? `; ${closed} closed (--all)` : '';
    const counted = flags.all ? (records.length === 1 ? 'record' : 'records') : 'open';
    out.line(out.c.dim(`${records.length} ${counted} in ${ledgerPath}${hint}`));
  });
}
