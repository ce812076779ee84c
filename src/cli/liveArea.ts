/**
 * The few lines at the bottom of a terminal that `closeout` redraws while it follows tasks (status, message,
 * elapsed time, next poll). Only used on a TTY; everything else prints plain lines.
 */

// eslint-disable-next-line no-control-regex
const SGR = /\u001b\[[0-9;]*m/g;

export function visibleLength(text: string): number {
  return text.replace(SGR, '').length;
}

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

/** Cut a line with colour codes to `width` visible characters, so it never wraps (a wrapped line breaks erase()). */
export function truncate(text: string, width: number): string {
  if (visibleLength(text) <= width) return text;
  let visible = 0;
  let out = '';
  // split into colour codes and plain runs; keep every code, cut the plain text
  // eslint-disable-next-line no-control-regex
  for (const part of text.split(/(\u001b\[[0-9;]*m)/)) {
    if (part.startsWith('\u001b[')) {
      out += part;
    } else if (visible < width - 1) {
      const room = width - 1 - visible;
      out += part.slice(0, room);
      visible += Math.min(room, part.length);
    }
  }
  return text.includes('\u001b[') ? `${out}…\u001b[0m` : `${out}…`;
}
