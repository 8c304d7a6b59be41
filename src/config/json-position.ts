/**
 * Where a JSON text stops being JSON (RFC 8259), as an offset: V8 in Node 20
 * often names no position at all ("Unexpected token ',', ... is not valid
 * JSON"), and an admin wants a line and a column. Only called on a text that
 * JSON.parse rejected; returns the offset of the first character that cannot
 * continue a valid document (the text's length when it ends too early).
 */
export function jsonErrorOffset(text: string): number {
  let i = 0;
  const ws = () => {
    while (i < text.length && ' \t\n\r'.includes(text[i]!)) i++;
  };
  class Stop extends Error {}
  const stop = (): never => {
    throw new Stop();
  };
  const expect = (s: string) => {
    for (const ch of s) if (text[i] === ch) i++;
    else stop();
  };
  const string = () => {
    expect('"');
    for (;;) {
      if (i >= text.length) stop();
      const c = text.charCodeAt(i);
      if (c === 0x22) return void i++;
      if (c < 0x20) stop();
      if (c === 0x5c) {
        i++;
        const e = text[i];
        if (e === 'u') {
          i++;
          for (let k = 0; k < 4; k++) /[0-9a-fA-F]/.test(text[i] ?? '') ? i++ : stop();
        } else if (e !== undefined && '"\\/bfnrt'.includes(e)) i++;
        else stop();
      } else i++;
    }
  };
  const digits = () => {
    if (!/[0-9]/.test(text[i] ?? '')) stop();
    while (/[0-9]/.test(text[i] ?? '')) i++;
  };
  const number = () => {
    if (text[i] === '-') i++;
    if (text[i] === '0') i++;
    else digits();
    if (text[i] === '.') {
      i++;
      digits();
    }
    if (text[i] === 'e' || text[i] === 'E') {
      i++;
      if (text[i] === '+' || text[i] === '-') i++;
      digits();
    }
  };
  const value = (): void => {
    ws();
    const c = text[i];
    if (c === '{') {
      i++;
      ws();
      if (text[i] === '}') return void i++;
      for (;;) {
        ws();
        string();
        ws();
        expect(':');
        value();
        ws();
        if (text[i] === ',') i++;
        else if (text[i] === '}') return void i++;
        else stop();
      }
    }
    if (c === '[') {
      i++;
      ws();
      if (text[i] === ']') return void i++;
      for (;;) {
        value();
        ws();
        if (text[i] === ',') i++;
        else if (text[i] === ']') return void i++;
        else stop();
      }
    }
    if (c === '"') return string();
    if (c === 't') return expect('true');
    if (c === 'f') return expect('false');
    if (c === 'n') return expect('null');
    if (c === '-' || /[0-9]/.test(c ?? '')) return number();
    stop();
  };
  try {
    value();
    ws();
    if (i < text.length) stop();
  } catch (err) {
    if (!(err instanceof Stop)) throw err;
  }
  return Math.min(i, text.length);
}

/** 1-based line and column of an offset (columns count UTF-16 units, as editors mostly do). */
export function lineColumn(text: string, offset: number): { line: number; column: number } {
  const before = text.slice(0, offset);
  return { line: before.split('\n').length, column: offset - (before.lastIndexOf('\n') + 1) + 1 };
}
