/**
 * The few lines at the bottom of a terminal that `closeout` redraws while it follows tasks (status, message,
 * elapsed time, next poll). Only used on a TTY; everything else prints plain lines.
 */
import { stripVTControlCharacters } from 'node:util';

import stringWidth from 'string-width';

/**
 * The columns `text` takes on a terminal: escape codes take none, a CJK character or an emoji two (string-width, after
 * Node's own stripVTControlCharacters).
 */
export function visibleLength(text: string): number {
  return stringWidth(stripVTControlCharacters(text));
}

const graphemes = new Intl.Segmenter(undefined, { granularity: 'grapheme' });

export class LiveArea {
  private drawn = 0;
  private lines: string[] = [];
  /** Nested pauses: a prompt and a remark may both pause drawing. */
  private pauses = 0;

  constructor(private readonly stream: NodeJS.WriteStream) {}

  /** Replace the live lines (drawn at once unless paused). */
  set(lines: string[]): void {
    this.lines = lines;
    if (this.pauses === 0) this.redraw();
  }

  /** Print a permanent line above the live lines. */
  print(text: string): void {
    this.erase();
    this.stream.write(`${text}\n`);
    if (this.pauses === 0) this.redraw();
  }

  /** Stop drawing (e.g. while a prompt owns the terminal). */
  pause(): void {
    this.erase();
    this.pauses += 1;
  }

  resume(): void {
    this.pauses = Math.max(0, this.pauses - 1);
    if (this.pauses === 0) this.redraw();
  }

  /** Erase the live lines for good and give the cursor back. */
  stop(): void {
    this.erase();
    this.lines = [];
    this.stream.write('\u001b[?25h');
  }

  private redraw(): void {
    this.erase();
    if (this.lines.length === 0) return;
    const width = Math.max(20, (this.stream.columns || 80) - 1);
    // the cursor is hidden while redrawing so the line does not flicker; stop() shows it again
    this.stream.write(`\u001b[?25l${this.lines.map((line) => `${truncate(line, width)}\n`).join('')}`);
    this.drawn = this.lines.length;
  }

  private erase(): void {
    if (this.drawn === 0) return;
    // up to the first live line, then clear to the end of the screen
    this.stream.write(`\u001b[${this.drawn}F\u001b[0J`);
    this.drawn = 0;
  }
}

/**
 * Cut a line with colour codes to `width` terminal columns, so it never wraps (a wrapped line breaks erase()). It cuts
 * between whole characters as the eye sees them (grapheme clusters: never inside a surrogate pair or an emoji
 * sequence), and keeps every colour code.
 */
export function truncate(text: string, width: number): string {
  if (visibleLength(text) <= width) return text;
  let visible = 0;
  let out = '';
  let full = false;
  // split into colour codes and plain runs; keep every code, cut the plain text (one column is left for the ellipsis)
  // eslint-disable-next-line no-control-regex
  for (const part of text.split(/(\u001b\[[0-9;]*m)/)) {
    if (part.startsWith('\u001b[')) {
      out += part;
      continue;
    }
    for (const { segment } of graphemes.segment(part)) {
      if (full) break;
      const columns = visibleLength(segment);
      if (visible + columns > width - 1) {
        full = true;
        break;
      }
      out += segment;
      visible += columns;
    }
  }
  return text.includes('\u001b[') ? `${out}…\u001b[0m` : `${out}…`;
}
