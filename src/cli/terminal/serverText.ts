/**
 * Text that comes from a server (status messages, elicitation messages, field titles, URLs, results, error messages,
 * HTTP error bodies) is shown as the server's words and nothing more: escape sequences, control characters and bidi
 * overrides are removed so it can neither repaint the terminal, reorder what is shown, nor pass itself off as
 * Closeout's own output. Every print path of the CLI that carries a server's words goes through this module.
 */

// CSI, OSC (terminated by BEL or ST) and other ESC sequences, then any remaining C0/C1 control character but \n, and
// the invisible bidi controls (embeddings, overrides, isolates, marks) that make text read other than it is stored
/* eslint-disable no-control-regex */
const ESCAPES =
  /\u001b\[[0-?]*[ -/]*[@-~]|\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)?|\u001b[@-_]|\u009b[0-?]*[ -/]*[@-~]/g;
const CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
// what JSON.stringify leaves raw but a terminal acts on: DEL and C1, bidi controls, line separators
const JSON_UNSAFE = /[\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g;
/* eslint-enable no-control-regex */

/** One line of server text: escapes and controls removed, line breaks and tabs turned into spaces. */
export function serverLine(text: string): string {
  return serverBlock(text).replace(/\s*\n\s*/g, ' ');
}

/** Server text that may span lines: escapes and controls removed, line breaks kept. */
export function serverBlock(text: string): string {
  return (
    text
      // Unicode line and paragraph separators are line breaks to some terminals, so they count as one
      .replace(/\r\n?|\u2028|\u2029/g, '\n')
      .replace(/\t/g, '  ')
      .replace(ESCAPES, '')
      .replace(CONTROLS, '')
  );
}

/**
 * One JSON document on one line, safe on a terminal: JSON.stringify escapes C0 controls but leaves DEL, C1 controls,
 * bidi controls and line separators raw; they are written as \u escapes here, so the document parses to the same value.
 */
export function terminalJson(value: unknown): string {
  return JSON.stringify(value).replace(JSON_UNSAFE, (ch) => `\\u${ch.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** Server text quoted line by line under a margin, so it is visibly not Closeout speaking. */
export function quoteServer(text: string, margin = '  │ '): string {
  return serverBlock(text)
    .split('\n')
    .map((line) => `${margin}${line}`)
    .join('\n');
}
