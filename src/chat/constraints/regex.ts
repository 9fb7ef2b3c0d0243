/**
 * Regular expressions (the common subset of Python's `re` and ECMAScript that structured outputs use)
 * → patterns. Literals, escapes, classes, `.`, groups (capturing, non-capturing, named), alternation,
 * greedy and lazy quantifiers, and `^`/`$` where they can only mean "the start/end of the text".
 * Lookarounds, backreferences, word boundaries, inline flags, possessive quantifiers and Unicode
 * property escapes are refused by name. `.` and the class escapes are ASCII-minded as in xgrammar:
 * `\d` is [0-9], `\w` is [A-Za-z0-9_], `.` is anything but a newline.
 */
import { CONSTRAINT_LIMITS, tooLarge } from './limits.ts';
import { alt, chars, complement, type CodeRange, EMPTY, MAX_CODE_POINT, normaliseRanges, type Pattern, repeat, seq } from './pattern.ts';
import { invalid, unsupported } from './constraint-error.ts';

type Ast =
  | { type: 'chars'; ranges: CodeRange[] }
  | { type: 'seq'; items: Ast[] }
  | { type: 'alt'; options: Ast[] }
  | { type: 'repeat'; item: Ast; min: number; max: number | null }
  | { type: 'anchor'; at: 'start' | 'end' };

const DIGIT: CodeRange[] = [[0x30, 0x39]];
const WORD: CodeRange[] = [[0x30, 0x39], [0x41, 0x5a], [0x5f, 0x5f], [0x61, 0x7a]];
const SPACE: CodeRange[] = [[0x09, 0x0d], [0x20, 0x20]];
const NEWLINE = 0x0a;
const SIMPLE_ESCAPES: Record<string, number> = { n: 0x0a, r: 0x0d, t: 0x09, f: 0x0c, v: 0x0b, a: 0x07, '0': 0x00 };

class Parser {
  private position = 0;
  private nesting = 0;
  private readonly points: number[];

  constructor(private readonly source: string) {
    this.points = Array.from(source, (character) => character.codePointAt(0)!);
  }

  parse(): Ast {
    const ast = this.alternation();
    if (this.position < this.points.length) throw this.error(`unbalanced parenthesis at position ${this.position}`);
    return ast;
  }

  private error(message: string) {
    return invalid(`invalid regex ${JSON.stringify(this.source)}: ${message}`);
  }

  private peek(offset = 0): string | undefined {
    const point = this.points[this.position + offset];
    return point === undefined ? undefined : String.fromCodePoint(point);
  }

  private lookingAt(text: string): boolean {
    return [...text].every((character, offset) => this.peek(offset) === character);
  }

  private alternation(): Ast {
    const options = [this.sequence()];
    while (this.peek() === '|') {
      this.position += 1;
      options.push(this.sequence());
    }
    return options.length === 1 ? options[0] : { type: 'alt', options };
  }

  private sequence(): Ast {
    const items: Ast[] = [];
    while (this.position < this.points.length && this.peek() !== '|' && this.peek() !== ')') {
      const atom = this.atom();
      items.push(this.quantified(atom));
    }
    return items.length === 1 ? items[0] : { type: 'seq', items };
  }

  private quantified(atom: Ast): Ast {
    for (;;) {
      const bounds = this.quantifier();
      if (!bounds) return atom;
      if (atom.type === 'anchor') throw this.error('nothing to repeat');
      if (this.peek() === '+') throw unsupported('a possessive quantifier (`*+`, `++`, `?+`, `{n}+`)');
      if (this.peek() === '?') this.position += 1; // lazy: the same language
      atom = { type: 'repeat', item: atom, min: bounds[0], max: bounds[1] };
    }
  }

  private quantifier(): [number, number | null] | null {
    const character = this.peek();
    if (character === '*' || character === '+' || character === '?') {
      this.position += 1;
      return character === '*' ? [0, null] : character === '+' ? [1, null] : [0, 1];
    }
    if (character !== '{') return null;
    const rest = this.source.slice(this.offsetOf(this.position));
    const match = /^\{(\d*)(,?)(\d*)\}/.exec(rest);
    if (!match || (match[1] === '' && match[3] === '' ) || (match[2] === '' && match[1] === '')) return null; // a literal brace
    this.position += match[0].length;
    const min = match[1] === '' ? 0 : Number(match[1]);
    const max = match[2] === '' ? min : match[3] === '' ? null : Number(match[3]);
    if (max !== null && max < min) throw this.error(`min repeat greater than max repeat in ${match[0]}`);
    return [min, max];
  }

  /** The string offset of a code point index (sources may hold astral characters). */
  private offsetOf(index: number): number {
    let offset = 0;
    for (let i = 0; i < index; i += 1) offset += this.points[i] > 0xffff ? 2 : 1;
    return offset;
  }

  private atom(): Ast {
    const character = this.peek()!;
    this.position += 1;
    switch (character) {
      case '(':
        return this.group();
      case '[':
        return { type: 'chars', ranges: this.characterClass() };
      case '.':
        return { type: 'chars', ranges: complement([[NEWLINE, NEWLINE]]) };
      case '^':
        return { type: 'anchor', at: 'start' };
      case '$':
        return { type: 'anchor', at: 'end' };
      case '\\':
        return this.escape(false);
      case '*':
      case '+':
      case '?':
        throw this.error(`nothing to repeat at position ${this.position - 1}`);
      default: {
        const point = this.points[this.position - 1];
        return { type: 'chars', ranges: [[point, point]] };
      }
    }
  }

  private group(): Ast {
    if (this.peek() === '?') {
      if (this.lookingAt('?:')) {
        this.position += 2;
      } else if (this.lookingAt('?=') || this.lookingAt('?!') || this.lookingAt('?<=') || this.lookingAt('?<!')) {
        throw unsupported('a lookaround assertion (`(?=`, `(?!`, `(?<=`, `(?<!`)');
      } else if (this.lookingAt('?P=')) {
        throw unsupported('a backreference (`(?P=name)`)');
      } else if (this.lookingAt('?P<') || this.lookingAt('?<')) {
        const close = this.points.indexOf('>'.codePointAt(0)!, this.position);
        if (close === -1) throw this.error('unterminated group name');
        this.position = close + 1;
      } else if (this.lookingAt('?>')) {
        throw unsupported('an atomic group (`(?>`)');
      } else {
        throw unsupported('an inline flag or other `(?…)` group');
      }
    }
    if (this.nesting >= CONSTRAINT_LIMITS.regexNesting) throw tooLarge(`a regex with groups nested more than ${CONSTRAINT_LIMITS.regexNesting} deep`);
    this.nesting += 1;
    const inner = this.alternation();
    this.nesting -= 1;
    if (this.peek() !== ')') throw this.error('missing ), unterminated subpattern');
    this.position += 1;
    return inner;
  }

  private characterClass(): CodeRange[] {
    let negated = false;
    if (this.peek() === '^') {
      negated = true;
      this.position += 1;
    }
    const ranges: CodeRange[] = [];
    let first = true;
    for (;;) {
      const character = this.peek();
      if (character === undefined) throw this.error('unterminated character set');
      if (character === ']' && !first) {
        this.position += 1;
        break;
      }
      first = false;
      const low = this.classMember();
      if (typeof low === 'number' && this.peek() === '-' && this.peek(1) !== undefined && this.peek(1) !== ']') {
        this.position += 1;
        const high = this.classMember();
        if (typeof high !== 'number') throw this.error('bad character range');
        if (high < low) throw this.error(`bad character range ${String.fromCodePoint(low)}-${String.fromCodePoint(high)}`);
        ranges.push([low, high]);
      } else if (typeof low === 'number') {
        ranges.push([low, low]);
      } else {
        ranges.push(...low);
      }
    }
    return negated ? complement(ranges) : normaliseRanges(ranges);
  }

  /** One code point, or a whole set for a class escape such as `\d`. */
  private classMember(): number | CodeRange[] {
    const point = this.points[this.position];
    this.position += 1;
    if (point !== 0x5c) return point;
    if (this.peek() === 'b') {
      this.position += 1;
      return 0x08; // backspace inside a class
    }
    const escaped = this.escape(true);
    if (escaped.type !== 'chars') throw this.error('bad escape in a character set');
    const only = escaped.ranges.length === 1 && escaped.ranges[0][0] === escaped.ranges[0][1];
    return only ? escaped.ranges[0][0] : escaped.ranges;
  }

  private escape(inClass: boolean): Ast {
    const character = this.peek();
    if (character === undefined) throw this.error('bad escape (end of pattern)');
    this.position += 1;
    const set = (ranges: CodeRange[]): Ast => ({ type: 'chars', ranges });
    const one = (point: number): Ast => set([[point, point]]);
    switch (character) {
      case 'd':
        return set(DIGIT);
      case 'D':
        return set(complement(DIGIT));
      case 'w':
        return set(WORD);
      case 'W':
        return set(complement(WORD));
      case 's':
        return set(SPACE);
      case 'S':
        return set(complement(SPACE));
      case 'x':
        return one(this.hex(2, 2));
      case 'u':
        if (this.peek() === '{') {
          this.position += 1;
          const point = this.hex(1, 6);
          if (this.peek() !== '}') throw this.error('bad \\u{…} escape');
          this.position += 1;
          return one(point);
        }
        return one(this.hex(4, 4));
      case 'U':
        return one(this.hex(8, 8));
      case 'A':
        if (!inClass) return { type: 'anchor', at: 'start' };
        break;
      case 'Z':
      case 'z':
        if (!inClass) return { type: 'anchor', at: 'end' };
        break;
      case 'b':
      case 'B':
        throw unsupported('a word boundary assertion (`\\b`, `\\B`)');
      case 'p':
      case 'P':
        throw unsupported('a Unicode property escape (`\\p{…}`)');
      case 'k':
        throw unsupported('a backreference (`\\k<name>`)');
      case 'c':
      case 'N':
        throw unsupported(`the escape \\${character}`);
      default:
        if (character in SIMPLE_ESCAPES && !(character === '0' && /[0-9]/.test(this.peek() ?? ''))) return one(SIMPLE_ESCAPES[character]);
        if (/[1-9]/.test(character)) throw unsupported('a backreference (`\\1`)');
        if (/[A-Za-z0-9]/.test(character)) throw this.error(`bad escape \\${character}`);
        return one(character.codePointAt(0)!);
    }
    throw this.error(`bad escape \\${character} in a character set`);
  }

  private hex(min: number, max: number): number {
    let digits = '';
    while (digits.length < max && /[0-9a-fA-F]/.test(this.peek() ?? '')) {
      digits += this.peek();
      this.position += 1;
    }
    if (digits.length < min) throw this.error('bad hexadecimal escape');
    const point = parseInt(digits, 16);
    if (point > MAX_CODE_POINT) throw this.error('code point out of range');
    return point;
  }
}

/** Anchors become nothing where they can only mean the start or end of the text; elsewhere they are refused. */
function lower(ast: Ast, atStart: boolean, atEnd: boolean): Pattern {
  switch (ast.type) {
    case 'chars':
      return chars(ast.ranges);
    case 'anchor':
      if ((ast.at === 'start' && atStart) || (ast.at === 'end' && atEnd)) return EMPTY;
      throw unsupported(`\`${ast.at === 'start' ? '^' : '$'}\` anywhere but the start or end of the pattern`);
    case 'alt':
      return alt(...ast.options.map((option) => lower(option, atStart, atEnd)));
    case 'repeat':
      return repeat(lower(ast.item, false, false), ast.min, ast.max);
    case 'seq': {
      // An item is at the start when only start anchors precede it, at the end when only end anchors follow.
      const isAnchor = (item: Ast, at: 'start' | 'end') => item.type === 'anchor' && item.at === at;
      const leading = ast.items.findIndex((item) => !isAnchor(item, 'start'));
      let trailing = ast.items.length - 1;
      while (trailing >= 0 && isAnchor(ast.items[trailing], 'end')) trailing -= 1;
      return seq(
        ...ast.items.map((item, index) =>
          lower(item, atStart && (leading === -1 || index <= leading), atEnd && (trailing === -1 || index >= trailing)),
        ),
      );
    }
  }
}

function parseRegex(source: string): Ast {
  const { regexLength } = CONSTRAINT_LIMITS;
  if (source.length > regexLength) throw tooLarge(`a regex of more than ${regexLength} characters (this one has ${source.length})`);
  return new Parser(source).parse();
}

/** The regex must match the whole text (vLLM's `regex` and `choice` semantics). */
export function regexPattern(source: string): Pattern {
  return lower(parseRegex(source), true, true);
}

/**
 * JSON Schema's `pattern` semantics: the regex may match anywhere in the string unless anchored, so an
 * unanchored side is padded with `filler*` (any character the string may hold).
 */
export function searchPattern(source: string, filler: Pattern): Pattern {
  const ast = parseRegex(source);
  const options = ast.type === 'alt' ? ast.options : [ast];
  return alt(
    ...options.map((option) => {
      const items = option.type === 'seq' ? option.items : [option];
      const anchoredStart = items[0]?.type === 'anchor' && items[0].at === 'start';
      const last = items.at(-1);
      const anchoredEnd = last?.type === 'anchor' && last.at === 'end';
      const core = lower(option, anchoredStart, anchoredEnd);
      return seq(anchoredStart ? EMPTY : repeat(filler, 0, null), core, anchoredEnd ? EMPTY : repeat(filler, 0, null));
    }),
  );
}
