/**
 * What a ledger location string names (issue 17): a `postgres://` connection string is a PostgresLedger shared by a
 * fleet, anything else a SQLite ledger file. Kept apart from the ledgers so that telling them apart loads neither.
 */

/** Whether a ledger location names a PostgreSQL database rather than a SQLite file. */
export function isPostgresLocation(location: string): boolean {
  return /^postgres(ql)?:\/\//i.test(location);
}

/**
 * A connection string fit for a log line or an error: the password replaced by `***` (issue 17: the password never
 * reaches a log). Query parameters that carry one (`password=`) are masked too.
 */
export function redactConnectionString(connectionString: string): string {
  try {
    const url = new URL(connectionString);
    if (url.password !== '') url.password = '***';
    for (const key of [...url.searchParams.keys()]) {
      if (/pass/i.test(key)) url.searchParams.set(key, '***');
    }
    return url.href;
  } catch {
    return 'postgres://(a connection string that is not a URL)';
  }
}

/** A ledger location as it may be shown: a file path as it is, a connection string without its password. */
export function displayLedgerLocation(location: string): string {
  return isPostgresLocation(location) ? redactConnectionString(location) : location;
}
