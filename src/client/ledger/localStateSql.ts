/**
 * The local-state predicates of both ledgers' SQL, written from the one definition of the states (`LOCAL_STATES`,
 * ledger.ts) so that a state is named in one place, as the task stores take task status from protocol/status.ts. Each
 * is built as literal text: a partial index serves a query only when the query repeats the index's own predicate,
 * which parameters would not.
 */
import type { LocalState } from './localState.js';

/** One local state as an SQL string literal, checked against `LocalState` at compile time. */
export function sqlLocalState(state: LocalState): string {
  return `'${state}'`;
}

/** `local_state IN ('a','b')`, prefixed by `table.` when given. */
export function localStateIn(states: readonly LocalState[], table?: string): string {
  return `${table === undefined ? '' : `${table}.`}local_state IN (${states.map(sqlLocalState).join(',')})`;
}
