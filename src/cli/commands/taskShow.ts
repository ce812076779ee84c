/**
 * `closeout task show TASK_ID`: one task as the server store holds it, for the operator: its arguments, status,
 * attempts and lease holder, input requests and answers, durable steps and checkpoint, result or error. The store
 * keeps no history of statuses (a client's ledger does: `closeout show`).
 */
import type { Command } from 'commander';

import type { StoredTask, TaskStore } from '../../server/store/taskStore.js';
import type { JsonFlags } from '../commonOptions.js';
import { addJsonOption, addTaskIdArgument } from '../commonOptions.js';
import { addStoreOption, openStoreToRead, type StoreFlags } from '../storeOpen.js';
import { isTaskIdPrefix, noSuchTask } from '../taskIdPrefix.js';
import { Output } from '../terminal/output.js';
import { serverLine } from '../terminal/serverText.js';
import { detailJson, detailLines } from '../terminal/storeTaskView.js';

export function registerTaskShow(program: Command): void {
  const task = program.command('task').description('One task of a server store (see `closeout task show --help`)');
  const command = task
    .command('show')
    .description('Show a task of a server store: arguments, status, attempts, lease, inputs, steps, result or error');
  addTaskIdArgument(command, 'a taskId, or a prefix that only one task id of the store starts with');
  addStoreOption(command);
  addJsonOption(command, 'print one JSON document: {"store", "task": {...}}');
  command.action(async (ref: string, flags: JsonFlags & StoreFlags) => {
    const out = new Output({ json: flags.json });
    const { store, shown } = await openStoreToRead(flags.store);
    try {
      const found = await findTask(store, ref, shown);
      const steps = await store.readSteps(found.taskId);
      out.event({ store: shown, task: detailJson(found, steps) });
      for (const line of detailLines(found, steps, out.c, store.now?.() ?? Date.now())) out.line(line);
    } finally {
      await store.close();
    }
  });
}

/** The task with this id, else the one task whose id starts with it; a clear error for none or several. */
async function findTask(store: TaskStore, ref: string, shown: string): Promise<StoredTask> {
  const exact = await store.get(ref);
  if (exact) return exact;
  const page =
    !isTaskIdPrefix(ref) || !store.listTasks ? undefined : await store.listTasks({ taskIdPrefix: ref, limit: 2 });
  const starting = page?.tasks ?? [];
  if (starting.length === 1) {
    const task = await store.get(starting[0]!.taskId);
    if (task) return task;
  }
  throw noSuchTask(serverLine(ref), starting.length, shown, 'closeout tasks --store ...');
}
