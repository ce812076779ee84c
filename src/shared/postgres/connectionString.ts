/**
 * What a PostgreSQL connection string is, and how it may be shown: the one test for "is this a PostgreSQL URL" and the
 * one redaction rule (the password never reaches a log or an error message) that the task store, the ledger and the
 * CLI share. Loads no driver.
 */

const POSTGRES_URL = /^postgres(ql)?:\/\//i;

/** Whether a location names a PostgreSQL database (`postgres://` or `postgresql://`) rather than a SQLite file. */
export function isPostgresUrl(location: string): boolean {
  return POSTGRES_URL.test(location);
}

/** Query parameters that carry a password (`password=`, `sslpassword=`, ...). */
function carriesPassword(key: string): boolean {
  return /pass/i.test(key);
}

/**
 * A connection string fit for a log line or an error: the password replaced by `***`. Query parameters that carry one
 * (`password=`) are masked too.
 */
export function redactConnectionString(connectionString: string): string {
  try {
    const url = new URL(connectionString);
    if (url.password !== '') url.password = '***';
    for (const key of [...url.searchParams.keys()]) {
      if (carriesPassword(key)) url.searchParams.set(key, '***');
    }
    return url.href;
  } catch {
    return 'postgres://(a connection string that is not a URL)';
  }
}

/** Every form of the password a connection string carries (as written, decoded, in a query parameter), if any. */
export function passwordsOf(connectionString: string): string[] {
  try {
    const url = new URL(connectionString);
    const found = [url.password, decodeURIComponent(url.password)];
    for (const [key, value] of url.searchParams) if (carriesPassword(key)) found.push(value);
    return [...new Set(found.filter((password) => password.length >= 1))];
  } catch {
    return [];
  }
}

/** `message` with every one of `passwords` replaced by `***`. */
export function scrubPasswords(message: string, passwords: readonly string[]): string {
  let scrubbed = message;
  for (const password of passwords) scrubbed = scrubbed.split(password).join('***');
  return scrubbed;
}
