// Hostile peers, property-based over real HTTP on a real SQLite file: arbitrary and adversarial JSON at
// tasks/get, tasks/update, tasks/cancel and tools/call of task tools. Invariants: only precise JSON-RPC errors (or
// valid results) come back, never a 5xx or a dropped connection; the server stays up; the stored rows of tasks the
// input must not touch are unchanged; replayed and reordered updates keep the first answer to each key; the heap
// stays bounded.
import { createHash } from 'node:crypto';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

import type Database from 'better-sqlite3';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod/v4';

import { MAX_REQUEST_JSON_DEPTH } from '../../src/server/jsonDepthGuard.js';
import { DEFAULT_LIMITS } from '../../src/server/limits.js';
import { openDatabase } from '../../src/shared/sqlite/sqliteDriver.js';
import { PROTOCOL_VERSION, rpc, type RpcResponse, TASKS } from '../support/rpc.js';
import { startTestServer, type TestServer } from '../support/testServer.js';
import { waitFor } from '../support/waitFor.js';

const ALICE = 'alice-token';
const BOB = 'bob-token';
const PRINCIPAL: Record<string, string> = { [ALICE]: 'client:alice', [BOB]: 'client:bob' };
const NOT_FOUND = { code: -32602, message: 'Failed to retrieve task: Task not found' };
/** Codes a hostile request may get: parse, request, method, params, header mismatch, capability, version, 413. */
const PRECISE_CODES = new Set([-32700, -32600, -32601, -32602, -32020, -32021, -32022, -32000]);

// ---- a value that is sent as raw JSON text, so deep nesting needs no recursion on the sending side ----------------

class RawJson {
  constructor(
    readonly json: string,
    readonly label: string,
  ) {}
  toString(): string {
    return this.label;
  }
}
const deepRaw = (levels: number) => new RawJson('{"a":'.repeat(levels) + '0' + '}'.repeat(levels), `deep(${levels})`);
const wideRaw = (keys: number) =>
  new RawJson(`{${Array.from({ length: keys }, (_, i) => `"k${i}":${i}`).join(',')}}`, `wide(${keys})`);
const longRaw = (items: number) => new RawJson(`[${'0,'.repeat(items)}0]`, `long(${items})`);
const stringRaw = (char: string, length: number) => new RawJson(`"${char.repeat(length)}"`, `"${char}"*${length}`);

/** JSON text of `value` with every RawJson spliced in as its text. */
function toJsonText(value: unknown): string {
  const raws: RawJson[] = [];
  const nonce = createHash('sha256').update(String(Math.random())).digest('hex').slice(0, 12);
  const text = JSON.stringify(value, (_key, v: unknown) => {
    if (v instanceof RawJson) return `@@raw${nonce}:${raws.push(v) - 1}@@`;
    return v;
  });
  return text.replace(new RegExp(`"@@raw${nonce}:(\\d+)@@"`, 'g'), (_m, i: string) => raws[Number(i)]!.json);
}

/** Containers on the deepest path (iterative: the values here may nest 50,000 deep). */
function levelsOf(value: unknown): number {
  let max = 0;
  const pending: [unknown, number][] = [[value, 0]];
  while (pending.length > 0) {
    const [node, depth] = pending.pop()!;
    if (typeof node !== 'object' || node === null) continue;
    max = Math.max(max, depth + 1);
    for (const child of Array.isArray(node) ? node : Object.values(node)) pending.push([child, depth + 1]);
  }
  return max;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * Whether no Mcp-Name header can name `id`: a lone surrogate has no UTF-8 form, and the SDK's Base64 decoding drops
 * a leading U+FEFF (its TextDecoder strips a BOM). Such ids are refused as a header mismatch (-32020).
 */
const unnameable = (id: string) => LONE_SURROGATE.test(id) || id.startsWith('\ufeff');

/** A body nesting deeper than the guard's limit is refused before anything else looks at it. */
function refusedAsTooDeep(response: RpcResponse, sent: string, what: string): boolean {
  if (levelsOf(JSON.parse(sent)) <= MAX_REQUEST_JSON_DEPTH) {
    expect(response.error?.message ?? '', what).not.toMatch(/nests deeper than this server's limit of \d+ levels$/);
    return false;
  }
  expect(response, what).toMatchObject({
    httpStatus: 400,
    error: { code: -32600, message: `Invalid Request: the JSON nests deeper than this server's limit of 512 levels` },
  });
  return true;
}

/** The Mcp-Name header a correct client sends for `value`: as is when plain visible ASCII, else the Base64 sentinel. */
function mcpName(value: unknown): string | undefined {
  if (typeof value !== 'string') return undefined;
  const plain = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/.test(value) && !value.startsWith('=?base64?');
  return plain ? value : `=?base64?${Buffer.from(value, 'utf8').toString('base64')}?=`;
}

// ---- the wire --------------------------------------------------------------------------------------------------------

type Envelope = 'ok' | 'no-extension' | 'none' | { garbage: Record<string, unknown> };

interface Shot {
  method: string;
  params: unknown;
  token: string;
  envelope: Envelope;
}

function envelopeMeta(envelope: Envelope): Record<string, unknown> | undefined {
  if (envelope === 'none') return undefined;
  if (typeof envelope === 'object') return envelope.garbage;
  return {
    'io.modelcontextprotocol/protocolVersion': PROTOCOL_VERSION,
    'io.modelcontextprotocol/clientInfo': { name: 'hostile', version: '0.0.0' },
    'io.modelcontextprotocol/clientCapabilities': envelope === 'ok' ? { extensions: { [TASKS]: {} } } : {},
  };
}

let nextId = 1;

/** Sends a shot as the raw bytes it describes; returns the answer and the JSON text that was sent. */
async function fire(url: string, shot: Shot): Promise<{ response: RpcResponse; sent: string }> {
  const meta = envelopeMeta(shot.envelope);
  const own = isPlainObject(shot.params) ? shot.params : undefined;
  // the envelope goes in params._meta, beside whatever hostile _meta entries the params bring
  const params =
    own && meta ? { ...own, _meta: { ...meta, ...(isPlainObject(own['_meta']) && own['_meta']) } } : shot.params;
  const sent = toJsonText({ jsonrpc: '2.0', id: nextId++, method: shot.method, params });
  const name = mcpName(own?.[shot.method === 'tools/call' ? 'name' : 'taskId']);
  const response = await rpc(
    url,
    shot.method,
    {},
    {
      token: shot.token,
      rawBody: sent,
      // no client can send a header longer than the HTTP server takes (16 KiB): such a name goes without one
      headers: { 'mcp-name': name !== undefined && name.length <= 8192 ? name : undefined },
    },
  );
  return { response, sent };
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value) && !(value instanceof RawJson);
}

/** The invariant every answer to a hostile request keeps, whatever was sent. */
function expectPrecise(response: RpcResponse, what: string): void {
  expect(response.httpStatus, what).toBeLessThan(500);
  const { result, error } = response;
  expect(result === undefined || error === undefined, `${what}: result and error`).toBe(true);
  if (response.httpStatus !== 200)
    expect(error, `${what}: HTTP ${response.httpStatus} without a JSON-RPC error`).toBeDefined();
  if (error) {
    expect(Number.isInteger(error.code), what).toBe(true);
    expect(PRECISE_CODES.has(error.code), `${what}: code ${error.code} ${error.message}`).toBe(true);
    expect(typeof error.message === 'string' && error.message.length > 0, what).toBe(true);
  } else {
    expect(typeof result, `${what}: neither result nor error`).toBe('object');
  }
}

const describeShot = (shot: Shot) =>
  `${shot.method} as ${PRINCIPAL[shot.token]} ${JSON.stringify(shot.envelope).slice(0, 60)} ${toJsonText(shot.params).slice(0, 160)}`;

// ---- the server, its victims and the store rows they must keep ------------------------------------------------------

let server: TestServer;
let db: Database.Database;
const storeErrors: Error[] = [];
const gates: (() => void)[] = [];
/** Alice's tasks, one per state: hostile input must never change their rows. */
const victims: Record<string, string> = {};

function elicit(message: string) {
  return {
    method: 'elicitation/create' as const,
    params: { mode: 'form', message, requestedSchema: { type: 'object', properties: {} } },
  };
}

beforeAll(async () => {
  server = await startTestServer(
    (tasks) => {
      tasks.registerTool('echo', { task: { support: 'optional' } }, (args) => ({
        content: [{ type: 'text', text: createHash('sha256').update(JSON.stringify(args)).digest('hex') }],
      }));
      tasks.registerTool(
        'typed',
        {
          inputSchema: z.object({ id: z.string().max(64), n: z.number().int().optional() }),
          task: { support: 'required' },
        },
        ({ id, n }) => ({ content: [{ type: 'text', text: `${id}:${n ?? '-'}` }] }),
      );
      tasks.registerTool(
        'plain',
        { inputSchema: z.object({ text: z.string() }), task: { support: 'never' } },
        ({ text }) => ({ content: [{ type: 'text', text }] }),
      );
      tasks.registerTool('fails', { task: { support: 'required' } }, () => {
        throw { code: -32000, message: 'refused upstream' };
      });
      tasks.registerTool('gated', { task: { support: 'required' } }, async (_args, ctx) => {
        await new Promise<void>((resolve, reject) => {
          gates.push(resolve);
          ctx.signal.addEventListener('abort', () => reject(ctx.signal.reason), { once: true });
        });
        return { content: [] };
      });
      tasks.registerTool(
        'asks',
        { inputSchema: z.object({ keys: z.array(z.string()).min(1).max(4) }), task: { support: 'required' } },
        async ({ keys }, ctx) => {
          const answers = await Promise.all(keys.map((key) => ctx.input(key, elicit(key))));
          return {
            content: [{ type: 'text', text: JSON.stringify(Object.fromEntries(keys.map((k, i) => [k, answers[i]]))) }],
          };
        },
      );
    },
    { server: { onError: (error) => storeErrors.push(error) }, serve: { tokens: { [ALICE]: 'alice', [BOB]: 'bob' } } },
  );
  db = openDatabase(server.store.path);
  const create = async (name: string, args: Record<string, unknown> = {}) =>
    (
      await rpc(
        server.url,
        'tools/call',
        { name, arguments: args },
        { token: ALICE, capabilities: { elicitation: {} } },
      )
    ).result!['taskId'] as string;
  victims['completed'] = await create('echo', { victim: true });
  victims['failed'] = await create('fails');
  victims['working'] = await create('gated');
  victims['input_required'] = await create('asks', { keys: ['q'] });
  victims['cancelled'] = await create('gated');
  await rpc(server.url, 'tasks/cancel', { taskId: victims['cancelled'] }, { token: ALICE });
  for (const [status, taskId] of Object.entries(victims)) {
    await waitFor(`victim ${status}`, async () => {
      const r = await rpc(server.url, 'tasks/get', { taskId }, { token: ALICE });
      return r.result?.['status'] === status ? true : undefined;
    });
  }
});

afterAll(async () => {
  for (const open of gates) open();
  db?.close();
  await server?.close();
});

/** The victims' rows as stored, less the lease expiry the runtime renews on its own. */
function victimRows(): unknown {
  const ids = JSON.stringify(Object.values(victims));
  const tasks = (
    db.prepare(`SELECT * FROM tasks WHERE task_id IN (SELECT value FROM json_each(?)) ORDER BY task_id`).all(ids) as {
      lease_expires_at?: unknown;
    }[]
  ).map(({ lease_expires_at: _renewed, ...row }) => row);
  const inputs = db
    .prepare(`SELECT * FROM task_inputs WHERE task_id IN (SELECT value FROM json_each(?)) ORDER BY task_id, seq`)
    .all(ids);
  return { tasks, inputs };
}

const rowCount = () => (db.prepare('SELECT COUNT(*) AS n FROM tasks').get() as { n: number }).n;

async function stillServing(): Promise<void> {
  const r = await rpc(server.url, 'tools/call', { name: 'plain', arguments: { text: 'up' } }, { token: ALICE });
  expect(r.result).toMatchObject({ content: [{ type: 'text', text: 'up' }] });
}

// ---- arbitraries -------------------------------------------------------------------------------------------------------

const ADVERSARIAL_STRINGS = [
  '',
  ' ',
  '\u0000',
  '\r\nX-Injected: 1',
  ' padded ',
  '\ud800',
  'a\udfffb',
  '=?base64?AAAA?=',
  '=?base64?!!!?=',
  '../../etc/passwd',
  "'; DROP TABLE tasks; --",
  '%00%0d%0a',
  '\u202egnp.exe',
  '\ufeffBOM',
  'ＡＢＣ',
  '🧨'.repeat(64),
  '__proto__',
  'constructor',
];

const text = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 20 }),
  fc.string({
    unit: fc.constantFrom('\u0000', '\n', '\r', '\t', ' ', '\u2028', '\u202e', '"', '\\', '%'),
    maxLength: 8,
  }),
  fc.constantFrom(...ADVERSARIAL_STRINGS),
);

/** Bounded so a run stays well under the 4 MiB body limit and a property finishes in seconds. */
const bigValue = fc.oneof(
  fc.integer({ min: 1, max: 50_000 }).map(deepRaw),
  fc.integer({ min: 250, max: 262 }).map(deepRaw),
  fc.integer({ min: 1, max: 40_000 }).map(wideRaw),
  fc.integer({ min: 1, max: 200_000 }).map(longRaw),
  fc.integer({ min: 1, max: 300_000 }).map((n) => stringRaw('x', n)),
  fc.integer({ min: 1_048_560, max: 1_048_580 }).map((n) => stringRaw('y', n)),
);

const wrongType = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.boolean(),
  fc.constant(null),
  fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 3 }),
  fc.dictionary(text, fc.jsonValue({ maxDepth: 2 }), { maxKeys: 3 }),
);

const anyJson = fc.oneof(
  { weight: 4, arbitrary: fc.jsonValue({ maxDepth: 3 }) },
  { weight: 1, arbitrary: bigValue },
  { weight: 1, arbitrary: text },
);

const taskIdLike = (own: string[]) =>
  fc.oneof(
    { weight: 3, arbitrary: text },
    { weight: 1, arbitrary: fc.integer({ min: 200, max: 3000 }).map((n) => 'i'.repeat(n)) },
    { weight: 1, arbitrary: fc.base64String({ minLength: 32, maxLength: 32 }) },
    {
      weight: 2,
      // near misses of real ids: case, a char more or less, padding
      arbitrary: fc
        .tuple(fc.constantFrom(...own), fc.nat(4))
        .map(
          ([id, how]) =>
            [
              id.toUpperCase() === id ? id.toLowerCase() : id.toUpperCase(),
              `${id}=`,
              id.slice(1),
              ` ${id}`,
              `${id}\u0000`,
            ][how]!,
        ),
    },
  );

const envelope: fc.Arbitrary<Envelope> = fc.oneof(
  { weight: 8, arbitrary: fc.constant('ok' as const) },
  { weight: 1, arbitrary: fc.constant('no-extension' as const) },
  { weight: 1, arbitrary: fc.constant('none' as const) },
  {
    weight: 1,
    arbitrary: fc
      .record(
        {
          'io.modelcontextprotocol/protocolVersion': fc.oneof(fc.constant(PROTOCOL_VERSION), anyJson),
          'io.modelcontextprotocol/clientInfo': anyJson,
          'io.modelcontextprotocol/clientCapabilities': fc.oneof(
            anyJson,
            fc.record({ extensions: fc.oneof(anyJson, fc.record({ [TASKS]: anyJson })) }),
          ),
        },
        { requiredKeys: [] },
      )
      .map((garbage) => ({ garbage })),
  },
);

const inputResponses = fc.oneof(
  fc.dictionary(
    fc.oneof(text, fc.constant('q')),
    fc.oneof(fc.record({ action: fc.constantFrom('accept', 'decline') }), anyJson),
    {
      maxKeys: 4,
    },
  ),
  anyJson,
);

// ---- the properties ------------------------------------------------------------------------------------------------------

describe('hostile input to the task methods', () => {
  it('gets precise JSON-RPC errors, the unknown-id answer for ids not the caller’s, and changes no victim', async () => {
    const before = victimRows();
    const victimIds = Object.values(victims);
    const shot = fc.record({
      method: fc.constantFrom('tasks/get', 'tasks/update', 'tasks/cancel'),
      token: fc.constantFrom(ALICE, BOB),
      envelope,
      params: fc.oneof(
        {
          weight: 6,
          arbitrary: fc.record(
            {
              taskId: fc.oneof({ weight: 4, arbitrary: taskIdLike(victimIds) }, { weight: 1, arbitrary: wrongType }),
              inputResponses,
              junk: anyJson,
            },
            { requiredKeys: ['taskId'] },
          ),
        },
        // bob aims at alice's real tasks
        {
          weight: 3,
          arbitrary: fc.record({ taskId: fc.constantFrom(...victimIds), inputResponses }, { requiredKeys: ['taskId'] }),
        },
        { weight: 1, arbitrary: fc.oneof(wrongType, bigValue) },
      ),
    });
    await fc.assert(
      fc.asyncProperty(shot, async (s) => {
        // alice may only aim at near misses of her ids: her own real ids would be legitimate requests
        const params = s.params as Record<string, unknown> | undefined;
        if (s.token === ALICE && victimIds.includes(params?.['taskId'] as string)) s = { ...s, token: BOB };
        const what = describeShot(s);
        const { response, sent } = await fire(server.url, s);
        expectPrecise(response, what);
        const taskId = params?.['taskId'];
        const tooDeep = refusedAsTooDeep(response, sent, what);
        const wellFormed =
          !tooDeep &&
          s.envelope === 'ok' &&
          typeof taskId === 'string' &&
          taskId.length >= 1 &&
          taskId.length <= 256 &&
          !unnameable(taskId);
        if (wellFormed && taskId.includes('\0')) {
          // an id no store could hold as sent is refused naming the field, on every store alike (DESIGN.md rule 14)
          expect(response.error, what).toMatchObject({
            code: -32602,
            message: expect.stringContaining('taskId must be well-formed Unicode text without NUL characters'),
          });
        } else if (wellFormed) {
          // nobody but alice owns these ids, and alice never sends her own: every answer is "not found"
          if (s.method === 'tasks/update' && response.error?.message !== NOT_FOUND.message) {
            expect(response.error, what).toMatchObject({
              code: -32602,
              message: expect.stringMatching(/inputResponses/),
            });
          } else {
            expect(response.error, what).toEqual(NOT_FOUND);
          }
        }
        if (typeof taskId === 'string' && unnameable(taskId) && s.envelope === 'ok' && !tooDeep) {
          expect(response.error?.code, what).toBe(-32020);
        }
        expect(victimRows(), what).toEqual(before);
      }),
      { numRuns: 90 },
    );
    await stillServing();
  });
});

describe('hostile input to tools/call of task tools', () => {
  it('answers a task or a precise error, stores exactly the arguments of a task it created, and nothing else', async () => {
    const before = victimRows();
    const shot = fc.record({
      method: fc.constant('tools/call'),
      token: fc.constantFrom(ALICE, BOB),
      envelope,
      params: fc.oneof(
        {
          weight: 6,
          arbitrary: fc.record(
            {
              name: fc.oneof(
                { weight: 5, arbitrary: fc.constantFrom('echo', 'typed') },
                { weight: 1, arbitrary: anyJson },
              ),
              arguments: fc.oneof(
                { weight: 2, arbitrary: fc.dictionary(text, anyJson, { maxKeys: 4 }) },
                {
                  weight: 1,
                  arbitrary: fc.record(
                    { id: fc.oneof(fc.string({ maxLength: 70 }), anyJson), n: anyJson },
                    { requiredKeys: [] },
                  ),
                },
                { weight: 1, arbitrary: fc.record({ s: bigValue }) },
                { weight: 1, arbitrary: anyJson },
                {
                  weight: 1,
                  arbitrary: fc.constantFrom(
                    new RawJson('{"__proto__":{"polluted":true}}', '__proto__'),
                    new RawJson('{"constructor":{"prototype":{"polluted":true}}}', 'constructor.prototype'),
                  ),
                },
              ),
              _meta: fc.record({ 'io.closeout/idempotencyKey': anyJson }, { requiredKeys: [] }),
            },
            { requiredKeys: ['name'] },
          ),
        },
        { weight: 1, arbitrary: fc.oneof(wrongType, bigValue) },
      ),
    });
    await fc.assert(
      fc.asyncProperty(shot, async (s) => {
        const what = describeShot(s);
        const rowsBefore = rowCount();
        const { response, sent } = await fire(server.url, s);
        expectPrecise(response, what);
        const result = response.result;
        if (result?.['resultType'] === 'task') {
          // a CreateTaskResult: exactly one new row, the caller's, holding the arguments as parsed from the wire
          const row = db
            .prepare('SELECT owner, tool_name, arguments FROM tasks WHERE task_id = ?')
            .get(result['taskId']) as { owner: string; tool_name: string; arguments: string } | undefined;
          expect(row, what).toBeDefined();
          expect(row!.owner, what).toBe(PRINCIPAL[s.token]);
          const wireArgs = (JSON.parse(sent) as { params: { arguments?: unknown } }).params.arguments ?? {};
          expect(levelsOf(wireArgs), what).toBeLessThanOrEqual(DEFAULT_LIMITS.maxJsonDepth);
          // (an idempotency key may name an earlier task of the caller's, with the arguments it was created with)
          const isNew = rowCount() === rowsBefore + 1;
          if (isNew && row!.tool_name === 'echo') expect(row!.arguments, what).toBe(JSON.stringify(wireArgs));
        } else if (response.error) {
          // a refusal creates nothing (the SDK may still answer an inline tool's error as a result)
          expect(rowCount(), what).toBe(rowsBefore);
        }
        // a plain-object echo call within the limits, declared and well-keyed, is always a task
        const params = isPlainObject(s.params) ? s.params : undefined;
        const idempotencyMeta = isPlainObject(params?.['_meta']) && Object.keys(params['_meta']).length > 0;
        const tooDeep = refusedAsTooDeep(response, sent, what);
        if (!tooDeep && s.envelope === 'ok' && params?.['name'] === 'echo' && !idempotencyMeta) {
          const wireArgs = (JSON.parse(sent) as { params: { arguments?: unknown } }).params.arguments;
          const isPlain = wireArgs === undefined || wireArgs === null || isPlainObject(wireArgs);
          if (isPlain && levelsOf(wireArgs) <= DEFAULT_LIMITS.maxJsonDepth) {
            const bytes = Buffer.byteLength(JSON.stringify(wireArgs ?? {}));
            if (bytes <= DEFAULT_LIMITS.maxArgumentsBytes) expect(result?.['resultType'], what).toBe('task');
            else expect(response.error?.message, what).toContain('(maxArgumentsBytes)');
          } else if (isPlain) {
            expect(response.error, what).toMatchObject({
              code: -32602,
              message: expect.stringContaining('(maxJsonDepth)'),
            });
          }
        }
        expect(victimRows(), what).toEqual(before);
        expect(({} as Record<string, unknown>)['polluted'], what).toBeUndefined();
      }),
      { numRuns: 90 },
    );
    await stillServing();
  });
});

describe('hostile bodies', () => {
  it('answers garbage, truncated JSON, batches and odd ids precisely, or not at all for notifications', async () => {
    const before = victimRows();
    const body = fc.oneof(
      fc.string({ unit: 'binary', maxLength: 200 }),
      fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)),
      fc
        .record(
          {
            jsonrpc: fc.oneof(fc.constant('2.0'), anyJson),
            id: fc.oneof(fc.integer(), fc.string(), fc.constant(null), wrongType),
            method: fc.oneof(fc.constantFrom('tasks/get', 'tasks/update', 'tasks/cancel', 'tools/call'), anyJson),
            params: anyJson,
          },
          { requiredKeys: [] },
        )
        .map(toJsonText),
      fc.array(fc.jsonValue({ maxDepth: 2 }), { maxLength: 4 }).map((v) => JSON.stringify(v)),
      fc
        .tuple(fc.constantFrom('tasks/get', 'tools/call'), fc.nat(200))
        .map(([method, cut]) =>
          JSON.stringify({ jsonrpc: '2.0', id: 1, method, params: { taskId: 'x', name: 'echo' } }).slice(0, cut),
        ),
    );
    await fc.assert(
      fc.asyncProperty(body, fc.constantFrom('tasks/get', 'tools/call'), async (rawBody, method) => {
        const response = await rpc(server.url, method, { taskId: 'x', name: 'echo' }, { token: BOB, rawBody });
        const what = `${method} ${rawBody.slice(0, 200)}`;
        if (response.httpStatus === 202) {
          // only a notification (or a response) is accepted without an answer
          expect(response.result ?? response.error, what).toBeUndefined();
        } else {
          expectPrecise(response, what);
        }
        expect(victimRows(), what).toEqual(before);
      }),
      { numRuns: 90 },
    );
    await stillServing();
  });
});

describe('replayed and reordered tasks/update', () => {
  it('keeps the first answer to each key, refuses a malformed update whole, and a replay changes nothing', async () => {
    const keyPool = ['k1', 'k2', 'k3'];
    const response = fc.record(
      {
        action: fc.constantFrom('accept', 'decline', 'cancel'),
        content: fc.dictionary(fc.string({ unit: 'grapheme', maxLength: 8 }), fc.jsonValue({ maxDepth: 1 }), {
          maxKeys: 2,
        }),
      },
      { requiredKeys: ['action'] },
    );
    const update = fc.record({
      answers: fc.dictionary(fc.constantFrom(...keyPool, 'unknown', 'q'), response, { maxKeys: 3 }),
      malformed: fc.oneof(
        { weight: 4, arbitrary: fc.constant(undefined) },
        { weight: 1, arbitrary: fc.oneof(fc.integer(), fc.string(), fc.constant(null), fc.array(fc.integer())) },
      ),
    });
    await fc.assert(
      fc.asyncProperty(
        fc.shuffledSubarray(keyPool, { minLength: 1 }),
        fc.array(update, { minLength: 1, maxLength: 6 }),
        fc.boolean(),
        async (keys, updates, replayConcurrently) => {
          const created = await rpc(
            server.url,
            'tools/call',
            { name: 'asks', arguments: { keys } },
            { token: ALICE, capabilities: { elicitation: {} } },
          );
          const taskId = created.result!['taskId'] as string;
          const outstanding = async () => {
            const r = await rpc(server.url, 'tasks/get', { taskId }, { token: ALICE });
            return Object.keys((r.result?.['inputRequests'] as object | undefined) ?? {}).sort();
          };
          await waitFor('every key outstanding', async () =>
            (await outstanding()).join() === [...keys].sort().join() ? true : undefined,
          );
          const send = (answers: Record<string, unknown>) =>
            rpc(server.url, 'tasks/update', { taskId, inputResponses: answers }, { token: ALICE });
          const model: Record<string, unknown> = {};
          const sentUpdates: Record<string, unknown>[] = [];
          for (const { answers, malformed } of updates) {
            const body: Record<string, unknown> = { ...answers };
            if (malformed !== undefined) body['bad'] = malformed;
            const r = await send(body);
            sentUpdates.push(body);
            if (malformed !== undefined) {
              expect(r.error?.code).toBe(-32602);
              continue;
            }
            expect(r.error).toBeUndefined();
            for (const [key, answer] of Object.entries(answers)) {
              if (keys.includes(key) && !(key in model)) model[key] = answer;
            }
            const left = keys.filter((key) => !(key in model)).sort();
            if (left.length > 0) expect(await outstanding()).toEqual(left);
          }
          // answer what is left, then replay every update (in a new order, or all at once): nothing may change
          const rest = Object.fromEntries(
            keys.filter((k) => !(k in model)).map((k) => [k, { action: 'accept', content: { last: true } }]),
          );
          if (Object.keys(rest).length > 0) {
            expect((await send(rest)).error).toBeUndefined();
            Object.assign(model, rest);
          }
          const replays = [...sentUpdates, rest].reverse();
          if (replayConcurrently) await Promise.all(replays.map(send));
          else for (const body of replays) await send(body);
          const done = await waitFor('the task to complete', async () => {
            const r = await rpc(server.url, 'tasks/get', { taskId }, { token: ALICE });
            return r.result?.['status'] === 'completed' ? r.result : undefined;
          });
          const returned = JSON.parse((done['result'] as { content: { text: string }[] }).content[0]!.text) as unknown;
          expect(returned).toEqual(Object.fromEntries(keys.map((k) => [k, model[k]])));
          const stored = db
            .prepare('SELECT key, response FROM task_inputs WHERE task_id = ? ORDER BY key')
            .all(taskId) as {
            key: string;
            response: string;
          }[];
          expect(stored.map((row) => [row.key, JSON.parse(row.response)])).toEqual(
            [...keys].sort().map((k) => [k, model[k]]),
          );
          // a replay after the end is acked and changes nothing
          const after = await rpc(server.url, 'tasks/get', { taskId }, { token: ALICE });
          for (const body of sentUpdates) expect((await send(body)).httpStatus).toBe(200);
          expect((await rpc(server.url, 'tasks/get', { taskId }, { token: ALICE })).result).toEqual(after.result);
        },
      ),
      { numRuns: 10 },
    );
    await stillServing();
  });
});

describe('memory under hostile load', () => {
  it('keeps nothing per request after hundreds of hostile requests, and no handler or waiter left behind', async () => {
    // gc is exposed for this process only: the heap is compared after full collections, so what remains is retained
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const heapUsed = async () => {
      // a turn of the event loop first: V8 keeps WeakRef targets alive until the current job ends
      await new Promise((resolve) => setTimeout(resolve, 10));
      gc();
      gc();
      return process.memoryUsage().heapUsed;
    };
    // many small requests catch what each request leaves behind; a few large ones catch a kept body
    const half = 'm'.repeat(512 * 1024);
    const small = (i: number): Shot[] => [
      { method: 'tasks/get', params: { taskId: `nope-${i}` }, token: BOB, envelope: 'ok' },
      { method: 'tasks/get', params: { taskId: victims['working'] }, token: BOB, envelope: 'ok' },
      {
        method: 'tasks/update',
        params: { taskId: victims['input_required'], inputResponses: { q: { action: 'accept' } } },
        token: BOB,
        envelope: 'ok',
      },
      { method: 'tasks/cancel', params: { taskId: victims['working'] }, token: BOB, envelope: 'ok' },
      { method: 'tasks/get', params: { taskId: 42 }, token: BOB, envelope: 'ok' },
      { method: 'tools/call', params: { name: 'typed', arguments: { id: 7 } }, token: BOB, envelope: 'ok' },
      { method: 'tools/call', params: { name: 'echo', arguments: { a: deepRaw(600) } }, token: BOB, envelope: 'ok' },
      { method: 'tools/call', params: { name: 'typed', arguments: {} }, token: BOB, envelope: 'no-extension' },
    ];
    const large: Shot[] = [
      { method: 'tasks/get', params: { taskId: 'nope', junk: half }, token: BOB, envelope: 'ok' },
      {
        method: 'tasks/update',
        params: { taskId: 'nope', inputResponses: { q: { action: 'accept', content: { x: half } } } },
        token: BOB,
        envelope: 'ok',
      },
      { method: 'tools/call', params: { name: 'typed', arguments: { id: half } }, token: BOB, envelope: 'ok' },
      { method: 'tasks/cancel', params: { taskId: 'nope', junk: deepRaw(50_000) }, token: BOB, envelope: 'ok' },
    ];
    const load = async (rounds: number) => {
      for (let i = 0; i < rounds; i++) {
        const shots = [...small(i), ...(i % 4 === 0 ? large : [])];
        for (const r of await Promise.all(shots.map((s) => fire(server.url, s)))) expectPrecise(r.response, 'load');
      }
    };
    const running = server.tasks.runningCount();
    await load(6); // warm every path first
    const baseline = await heapUsed();
    await load(10);
    const afterFirst = await heapUsed();
    await load(10);
    const afterSecond = await heapUsed();
    await load(10);
    const afterThird = await heapUsed();
    const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(2)} MiB`;
    // each load is 80 small and 12 large requests (~6 MiB). What the first load still warms up is not retained
    // again; what is kept per request is, every load: a later load may add next to nothing (-0.1 to 0.15 MiB
    // measured on an idle machine), so keeping ~8 KiB per request, or any one kind of large body, fails here. On a
    // busy machine one load's measure can catch work still in flight (0.86 MiB once, Node 24, the whole suite
    // beside it); what a load keeps per request it keeps every time, so the smaller of two loads is the measure
    expect(afterFirst - baseline, `first load kept ${mib(afterFirst - baseline)}`).toBeLessThan(4 * 1024 * 1024);
    const later = [afterSecond - afterFirst, afterThird - afterSecond];
    expect(Math.min(...later), `the next two loads kept ${later.map(mib).join(' and ')}`).toBeLessThan(768 * 1024);
    expect(server.tasks.runningCount()).toBe(running);
    await stillServing();
  });
});

describe('after all of it', () => {
  it('the store never failed and alice’s tasks are as they were', async () => {
    expect(storeErrors.map((e) => e.message)).toEqual([]);
    for (const [status, taskId] of Object.entries(victims)) {
      const r = await rpc(server.url, 'tasks/get', { taskId }, { token: ALICE });
      expect(r.result?.['status'], status).toBe(status);
    }
  });
});

describe('nesting the SDK cannot validate', () => {
  it('is refused with 400 and -32600 naming the limit, wherever it is in the request, not with a 500', async () => {
    // regression: 5,000 levels in the envelope overflowed the SDK's recursive zod validation and answered HTTP 500
    const places: Shot[] = [
      {
        method: 'tools/call',
        params: { name: 'echo', arguments: {} },
        token: ALICE,
        envelope: {
          garbage: {
            ...envelopeMeta('ok'),
            'io.modelcontextprotocol/clientCapabilities': { extensions: { [TASKS]: deepRaw(5000) } },
          },
        },
      },
      { method: 'tools/call', params: { name: 'echo', arguments: { a: deepRaw(5000) } }, token: ALICE, envelope: 'ok' },
      { method: 'tasks/get', params: { taskId: 'x', junk: deepRaw(5000) }, token: ALICE, envelope: 'ok' },
      {
        method: 'tasks/update',
        params: { taskId: 'x', inputResponses: { k: deepRaw(5000) } },
        token: ALICE,
        envelope: 'ok',
      },
    ];
    for (const shot of places) {
      const { response } = await fire(server.url, shot);
      expect(response, describeShot(shot)).toMatchObject({
        httpStatus: 400,
        error: {
          code: -32600,
          message: "Invalid Request: the JSON nests deeper than this server's limit of 512 levels",
        },
      });
    }
    // just within the limit, the request is served
    const within = await fire(server.url, {
      method: 'tools/call',
      params: { name: 'echo', arguments: { a: deepRaw(200) } },
      token: ALICE,
      envelope: 'ok',
    });
    expect(within.response.result?.['resultType']).toBe('task');
    await stillServing();
  });
});
