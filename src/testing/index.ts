/**
 * closeout/testing: the contract suites a `TaskStore` (closeout/server) or a `Ledger` (closeout/client) passes, for a
 * store or ledger of your own to prove itself (docs/server.md, "A store of your own"; docs/client.md, "A ledger of your
 * own"). Each suite declares vitest tests when called from a test file, so this entry point needs vitest, an optional
 * peer dependency; nothing else in the package imports it.
 */
export type { LedgerFixture } from './ledgerContract.js';
export { describeLedgerContract } from './ledgerContract.js';
export type { TaskStoreFixture } from './taskStoreContract.js';
export { describeTaskStoreContract } from './taskStoreContract.js';
