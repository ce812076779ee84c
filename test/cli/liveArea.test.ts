// Invariant: a live line never takes more terminal columns than the terminal has, whatever it holds (CJK, emoji,
// colour codes), so it never wraps and erase() removes exactly what was drawn; and a cut never splits a character
// (a surrogate pair, an emoji sequence).
import { PassThrough } from 'node:stream';
import { stripVTControlCharacters } from 'node:util';

import stringWidth from 'string-width';
import { describe, expect, it } from 'vitest';

import { LiveArea, truncate, visibleLength } from '../../src/cli/terminal/liveArea.js';
import { unstorableText } from '../../src/protocol/storableText.js';

/** Whether `text` holds a UTF-16 surrogate without its other half (unstorableText also names a NUL: none here). */
const hasLoneSurrogate = (text: string) => unstorableText(text) !== undefined;

const RED = '\u001b[31m';
const RESET = '\u001b[0m';

const STATUS_LINES = [
  `  [    3s] 任务 ${RED}working${RESET} · 正在处理第一批数据，请稍候，这需要一些时间才能完成全部的工作`,
  '  [   12s] 🚀 working · 🧑‍💻👩‍👩‍👧‍👦 deploying 🇯🇵🇫🇷 to every region 🌍🌎🌏 now, with more emoji 🎉🎉🎉🎉🎉🎉🎉',
  '  [ 1m02s] tâche ✅ terminée · ｆｕｌｌｗｉｄｔｈ ｌｅｔｔｅｒｓ ａｒｅ ｔｗｏ ｃｏｌｕｍｎｓ ｗｉｄｅ ｅａｃｈ',
];

describe('truncate', () => {
  it('cuts CJK and emoji status lines to the columns they take, never inside a character', () => {
    for (const line of STATUS_LINES) {
      for (let width = 20; width <= 80; width += 7) {
        const cut = truncate(line, width);
        expect(stringWidth(stripVTControlCharacters(cut)), `${line} at ${width}`).toBeLessThanOrEqual(width);
        expect(hasLoneSurrogate(cut), `${line} at ${width}`).toBe(false);
        // nothing is lost before the cut: the visible text is a prefix of the line's
        const shown = stripVTControlCharacters(cut).replace(/…$/, '');
        expect(stripVTControlCharacters(line).startsWith(shown)).toBe(true);
      }
    }
  });

  it('leaves a line that fits as it is, and measures columns, not UTF-16 units', () => {
    expect(truncate('short', 20)).toBe('short');
    expect(visibleLength('漢字')).toBe(4);
    expect(visibleLength(`${RED}ok${RESET}`)).toBe(2);
    expect(visibleLength('🇯🇵')).toBe(2);
  });
});

describe('LiveArea', () => {
  it('draws every line within the terminal width, so erasing it erases what was drawn', () => {
    const stream = Object.assign(new PassThrough(), { columns: 40 }) as unknown as NodeJS.WriteStream;
    let written = '';
    (stream as unknown as PassThrough).on('data', (chunk: Buffer) => (written += chunk.toString('utf8')));
    const area = new LiveArea(stream);
    area.set(STATUS_LINES);
    area.stop();
    const drawn = stripVTControlCharacters(written)
      .split('\n')
      .filter((line) => line.length > 0);
    expect(drawn).toHaveLength(STATUS_LINES.length);
    for (const line of drawn) {
      expect(stringWidth(line)).toBeLessThanOrEqual(39);
      expect(hasLoneSurrogate(line)).toBe(false);
    }
  });
});
