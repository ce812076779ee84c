/**
 * Where a command's output goes. Human mode: lines on stdout, redrawn live lines on a TTY, colour only on a TTY.
 * `--json`: stdout carries JSON only (one document, or one object per line while following); anything meant for a
 * person goes to stderr.
 */
import pc from 'picocolors';

import { LiveArea } from './liveArea.js';
import { terminalJson } from './serverText.js';

export type Colors = ReturnType<typeof pc.createColors>;

/** Colour only on a terminal, and never when NO_COLOR is set (no-color.org) or TERM is dumb. */
export function colorEnabled(stream: NodeJS.WriteStream, env: NodeJS.ProcessEnv = process.env): boolean {
  if (env['NO_COLOR'] !== undefined && env['NO_COLOR'] !== '') return false;
  return stream.isTTY === true && env['TERM'] !== 'dumb';
}

export function colorsFor(stream: NodeJS.WriteStream): Colors {
  return pc.createColors(colorEnabled(stream));
}

export class Output {
  readonly json: boolean;
  /** Colours for stdout. */
  readonly c: Colors;
  /** Colours for stderr. */
  readonly ce: Colors;
  /** Live lines are drawn (human mode, stdout is a terminal). */
  readonly live: boolean;
  private readonly area: LiveArea | undefined;
  /** Open prompts (nested); while there is one, every other line waits in `held`. */
  private prompts = 0;
  private held: (() => void)[] = [];

  constructor(
    options: { json?: boolean | undefined },
    readonly stdout: NodeJS.WriteStream = process.stdout,
    readonly stderr: NodeJS.WriteStream = process.stderr,
  ) {
    this.json = options.json === true;
    this.c = colorsFor(stdout);
    this.ce = colorsFor(stderr);
    this.live = !this.json && stdout.isTTY === true && process.env['TERM'] !== 'dumb';
    this.area = this.live ? new LiveArea(stdout) : undefined;
  }

  /** A line of human output on stdout; nothing in JSON mode (the JSON carries the same facts). */
  line(text = ''): void {
    if (this.json) return;
    if (this.prompts > 0) {
      this.held.push(() => this.line(text));
      return;
    }
    if (this.area) this.area.print(text);
    else this.stdout.write(`${text}\n`);
  }

  /** One JSON value on its own line of stdout; nothing in human mode. */
  event(value: unknown): void {
    if (!this.json) return;
    if (this.prompts > 0) {
      this.held.push(() => this.event(value));
      return;
    }
    this.stdout.write(`${terminalJson(value)}\n`);
  }

  /** A remark for the person at the terminal, on stderr in both modes (never mixed into what scripts read). */
  aside(text: string): void {
    if (this.prompts > 0) {
      this.held.push(() => this.aside(text));
      return;
    }
    this.area?.pause();
    this.stderr.write(`${text}\n`);
    this.area?.resume();
  }

  /** Set the live lines (ignored unless drawing live). */
  setLive(lines: string[]): void {
    this.area?.set(lines);
  }

  /**
   * A prompt owns the terminal until `endPrompt()`: the live lines are erased, and every line, event and remark
   * meant for the terminal meanwhile (another task's close-out, say) is held back, then printed in order.
   */
  beginPrompt(): void {
    this.prompts += 1;
    this.area?.pause();
  }

  endPrompt(): void {
    if (this.prompts === 0) return;
    this.prompts -= 1;
    this.area?.resume();
    if (this.prompts > 0) return;
    const held = this.held;
    this.held = [];
    for (const print of held) print();
  }

  /** Remove the live lines and show the cursor again. */
  stopLive(): void {
    this.area?.stop();
  }
}
