/**
 * Text that comes from a server (status messages, elicitation messages, field titles, URLs, results) is shown as
 * the server's words and nothing more: escape sequences and control characters are removed so it can neither
 * repaint the terminal nor pass itself off as Closeout's own output.
 */

// CSI, OSC (terminated by BEL or ST) and other ESC sequences, then any remaining C0/C1 control character but \n
/* eslint-disable no-control-regex */
const ESCAPES =
  /\u001b\[[0-?]*[ -/]*[@-~]|\u001b\][^\u0007\u001b]*(?:\u0007|\u001b\\)?|\u001b[@-_]|\u009b[0-?]*[ -/]*[@-~]/g;
const CONTROLS = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f]/g;
/* eslint-enable no-control-regex */

/** One line of server text: escapes and controls removed, line breaks and tabs turned into spaces. */
export function serverLine(text: string): string {
  return serverBlock(text).replace(/\s*\n\s*/g, ' ');
}

/** Server text that may span lines: escapes and controls removed, line breaks kept. */
export function serverBlock(text: string): string {
  return text.replace(/\r\n?/g, '\n').replace(/\t/g, '  ').replace(ESCAPES, '').replace(CONTROLS, '');
}

/** Server text quoted line by line under a margin, so it is visibly not Closeout speaking. */
export function quoteServer(text: string, margin = '  │ '): string {
  return serverBlock(text)
    .split('\n')
    .map((line) => `${margin}${line}`)
    .join('\n');
}
