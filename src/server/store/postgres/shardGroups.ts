/**
 * Which shard row each create of a batch counts on (docs/DESIGN.md, "Per-principal limits on PostgreSQL").
 */
import type { PendingCreate } from './batches.js';
import { COUNT_SHARDS, SHARD_GROUP, SHARD_GROUP_PRINCIPALS, SHARD_PARAMETER } from './quotaShards.js';

/**
 * How many creates of a principal in one batch share a shard row: what this instance learnt from the last deal of
 * each principal's quotas it made.
 */
export class ShardGroups {
  private readonly groups = new Map<string, number>();

  /**
   * A principal's shard group after the deal of its quotas this instance made last: about half the room each shard
   * got, from 1 to SHARD_GROUP. The oldest is forgotten past SHARD_GROUP_PRINCIPALS principals.
   */
  remember(principal: string, roomPerShard: number): void {
    this.groups.delete(principal);
    this.groups.set(principal, Math.max(1, Math.min(SHARD_GROUP, Math.floor(roomPerShard / 2))));
    if (this.groups.size > SHARD_GROUP_PRINCIPALS) this.groups.delete(this.groups.keys().next().value!);
  }

  /**
   * Places the creates of a batch on shards: each principal's on consecutive shards from the one its first create
   * drew, its group (`remember`; SHARD_GROUP without limits, 1 for a principal whose quotas another instance
   * dealt) to a shard. Every shard row a batch touches is written by its statement and its insert trigger, each row
   * once (bench/RESULTS.md, section 19): fewer rows, less work, as long as each shard has room for its group; a
   * create past its shard's quota takes the exact path, as a create alone would.
   */
  place(batch: readonly PendingCreate[]): void {
    const principals = new Map<string, { first: number; placed: number; group: number }>();
    for (const create of batch) {
      const { principal } = create.task;
      let at = principals.get(principal);
      if (!at) {
        const unlimited = create.open === null && create.stored === null;
        at = {
          first: create.shard,
          placed: 0,
          group: unlimited ? SHARD_GROUP : (this.groups.get(principal) ?? 1),
        };
        principals.set(principal, at);
      }
      create.shard = (at.first + Math.floor(at.placed++ / at.group)) % COUNT_SHARDS;
      create.parameters[SHARD_PARAMETER] = create.shard;
    }
  }
}
