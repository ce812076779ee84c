/**
 * What every command over the client's ledger starts from: where its output goes (human or `--json`) and which ledger
 * it uses, as given (`--ledger`, else `CLOSEOUT_LEDGER`, else the default file) and as shown to the user (a connection
 * string without its password).
 */
import { displayLedgerLocation } from '../client/ledger/ledgerLocation.js';
import type { JsonFlags, LedgerFlags } from './commonOptions.js';
import { resolveLedgerPath } from './ledgerFile.js';
import { ClientSession } from './session.js';
import type { PresetAnswer } from './terminal/elicitationPrompt.js';
import { canPrompt, elicitationHandler } from './terminal/elicitationPrompt.js';
import { Follower } from './terminal/follow.js';
import { Output } from './terminal/output.js';

export interface CommandContext {
  out: Output;
  /** The ledger to open: a file path or a postgres:// URL. */
  ledgerLocation: string;
  /** The same ledger as every message names it: never a password. */
  ledgerPath: string;
}

export function commandContext(flags: JsonFlags & LedgerFlags): CommandContext {
  const ledgerLocation = resolveLedgerPath(flags.ledger);
  return { out: new Output({ json: flags.json }), ledgerLocation, ledgerPath: displayLedgerLocation(ledgerLocation) };
}

/**
 * The existing ledger's session with a Follower wired to it, as `resume` and `resubmit` follow tasks: the follower
 * prints each task's changes and answers its elicitations (prompting at a terminal, else `preset`). Undefined when
 * there is no ledger yet.
 */
export async function openFollowingSession(
  context: CommandContext,
  preset: PresetAnswer | undefined,
): Promise<{ session: ClientSession; following: Follower } | undefined> {
  const { out, ledgerLocation } = context;
  const session = await ClientSession.openExisting({
    ledgerPath: ledgerLocation,
    inputHandlers: (endpoint) => ({ elicitation: elicitationHandler(following, endpoint) }),
    onEvent: (event) => following.onClientEvent(event),
  });
  if (!session) return undefined;
  const following = new Follower(out, (id) => session.ledger.get(id), {
    interactive: canPrompt(out),
    preset,
    now: () => session.ledger.now(),
  });
  return { session, following };
}
