// Invariant: `closeout serve` never prints the PostgreSQL password of its --store, whichever form of connection string
// pg accepts carries it (any letter case of the scheme, a password in the authority or in the query, percent-encoded,
// a host given in the query): the start line is built from the parsed connection string, not by editing the text.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

import { type StartedPostgres, startPostgres } from '../support/postgres.js';
import { startServe } from '../support/processes.js';
import { waitFor } from '../support/waitFor.js';

// a password that needs percent-encoding in a URL and that no other part of the start line contains
const PASSWORD = 'S3cr@t/pw:%x?#q';
const ENCODED = encodeURIComponent(PASSWORD);

let postgres: StartedPostgres;
let host: string;
let database: { name: string; connectionString: string; drop(): Promise<void> };

beforeAll(async () => {
  postgres = await startPostgres();
  database = await postgres.createDatabase();
  host = new URL(postgres.connectionString).host;
  const admin = new pg.Client({ connectionString: postgres.connectionString });
  await admin.connect();
  try {
    await admin.query(`CREATE ROLE closeout_redact LOGIN PASSWORD '${PASSWORD.replaceAll("'", "''")}'`);
    await admin.query(`GRANT ALL ON DATABASE ${database.name} TO closeout_redact`);
    await admin.query(`ALTER DATABASE ${database.name} OWNER TO closeout_redact`);
  } finally {
    await admin.end();
  }
}, 60_000);

afterAll(async () => {
  await database?.drop();
  await postgres?.stop();
});

describe('closeout serve --store postgres://…', { timeout: 60_000 }, () => {
  const forms: [string, () => string][] = [
    ['a password in the authority', () => `postgres://closeout_redact:${ENCODED}@${host}/${database.name}`],
    ['the postgresql:// scheme', () => `postgresql://closeout_redact:${ENCODED}@${host}/${database.name}`],
    ['an upper-case scheme', () => `POSTGRES://closeout_redact:${ENCODED}@${host}/${database.name}`],
    ['a password in the query', () => `postgres://closeout_redact@${host}/${database.name}?password=${ENCODED}`],
    [
      'the host, user and password in the query',
      () =>
        `postgres:///${database.name}?host=${host.split(':')[0]}&port=${host.split(':')[1]}&user=closeout_redact&password=${ENCODED}`,
    ],
  ];

  it.each(forms)('prints no password with %s', async (_what, store) => {
    const location = store();
    const server = await startServe(['--store', location]);
    try {
      // the start line follows the URL on stdout
      const line = await waitFor('the start line', () =>
        server
          .stderr()
          .split('\n')
          .find((l) => l.startsWith('closeout serve:')),
      );
      for (const secret of [PASSWORD, ENCODED, encodeURI(PASSWORD), 'S3cr']) {
        expect(server.stderr().includes(secret), `${secret} in: ${server.stderr()}`).toBe(false);
      }
      // it still says which database it serves from
      expect(line).toContain(database.name);
      expect(line).toContain('closeout_redact');
    } finally {
      await server.stop();
    }
  });
});
