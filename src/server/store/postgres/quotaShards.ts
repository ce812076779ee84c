/**
 * Per-principal counts and quotas on PostgreSQL, spread over shard rows (docs/DESIGN.md, "Per-principal limits on
 * PostgreSQL"): how many shards, how a batch places its creates on them, how a quota is dealt out again.
 */

/**
 * The rows each principal's counts and quotas are spread over. A create locks one, at random, so creates of one
 * principal (every caller, on a server without auth) run side by side; more shards, fewer collisions, but more quota
 * left idle in other shards when a principal nears its limit (then the exact path deals it out again). With 16 creates
 * in flight, one principal made 0.76 of 16 principals' throughput on 32 shards, 0.91 on 128 (bench section 13).
 */
export const COUNT_SHARDS = 128;

/**
 * At most this many creates of one principal in one batch share a shard row (\`placeInShards\`): 16 creates of one
 * principal then write 4 shard rows instead of about 15 (bench/RESULTS.md, section 19).
 */
export const SHARD_GROUP = 4;

/** The principals whose shard group an instance remembers; past it the oldest is forgotten (and spreads again). */
export const SHARD_GROUP_PRINCIPALS = 10_000;

/** Where the shard is in a create's parameters: $16 of `SQL.createInShard`, after `insertParameters`. */
export const SHARD_PARAMETER = 15;

/** Where the arguments' JSON text is in `insertParameters`: $4. */
export const ARGUMENTS_PARAMETER = 3;

/** One shard row of `closeout_principal_tasks`; BIGINT arrives as a string. */
export interface ShardCounts {
  shard: number;
  open_tasks: string;
  stored_tasks: string;
}

/**
 * New quotas for the shards holding `counts`: each keeps what it holds plus an even part of what is left of `limit`,
 * the remainder going to the shards from index `first` on, so that shard gets at least one when anything is left.
 * Their sum is the limit. Without a limit (null), zeros: the quota is then never read.
 */
export function dealQuotas(counts: number[], limit: number | null, first: number): number[] {
  if (limit === null) return counts.map(() => 0);
  const left = limit - counts.reduce((sum, n) => sum + n, 0);
  const n = counts.length;
  return counts.map((count, i) => count + Math.floor(left / n) + ((i - first + n) % n < left % n ? 1 : 0));
}
