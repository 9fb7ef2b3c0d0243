/**
 * Byte-level BPE: learns merges from a corpus and writes an HF `tokenizer.json`.
 * Pre-tokenization during training is done by `@huggingface/tokenizers` itself, built from the
 * very config we write, so training and inference split text identically.
 */
import * as tokenizers from '@huggingface/tokenizers';
import { BYTE_LEVEL_ALPHABET } from '../../src/conversation/tokenizer.ts';

// The package's .d.ts files do not resolve under NodeNext (extensionless imports); type what we use.
const { SequencePreTokenizer } = tokenizers as unknown as {
  SequencePreTokenizer: new (config: object) => { pre_tokenize(text: string): string[] };
};

/**
 * Qwen2's split: letters with one leading non-letter, every digit alone (arithmetic stays
 * legible to a small model), punctuation runs, newline runs and whitespace.
 */
const SPLIT_REGEX =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const BYTE_LEVEL = { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false } as const;

const PRE_TOKENIZER = {
  type: 'Sequence',
  pretokenizers: [{ type: 'Split', pattern: { Regex: SPLIT_REGEX }, behavior: 'Isolated', invert: false }, BYTE_LEVEL],
};

export interface AddedTokenSpec {
  content: string;
  special: boolean;
}

export interface LearnedBpe {
  vocab: Map<string, number>;
  merges: [string, string][];
}

interface Word {
  symbols: string[];
  count: number;
}

const pairKey = (left: string, right: string) => `${left} ${right}`; // byte-level symbols never contain ' '

/**
 * Learns merges until the vocabulary holds `vocabSize` tokens. Ties go to the lexically smallest
 * pair so the result does not depend on Map iteration order.
 */
export function learnBpe(texts: readonly string[], vocabSize: number): LearnedBpe {
  const preTokenizer = new SequencePreTokenizer(PRE_TOKENIZER);
  const wordCounts = new Map<string, number>();
  for (const text of texts) {
    for (const piece of preTokenizer.pre_tokenize(text)) wordCounts.set(piece, (wordCounts.get(piece) ?? 0) + 1);
  }
  const words: Word[] = [...wordCounts].map(([word, count]) => ({ symbols: [...word], count }));

  const pairCounts = new Map<string, number>();
  const wordsWithPair = new Map<string, Set<number>>();
  const countPairs = (wordIndex: number, sign: 1 | -1) => {
    const { symbols, count } = words[wordIndex];
    for (let i = 0; i + 1 < symbols.length; i++) {
      const key = pairKey(symbols[i], symbols[i + 1]);
      pairCounts.set(key, (pairCounts.get(key) ?? 0) + sign * count);
      if (sign > 0) {
        let holders = wordsWithPair.get(key);
        if (!holders) {
          holders = new Set();
          wordsWithPair.set(key, holders);
        }
        holders.add(wordIndex);
      }
    }
  };
  for (let index = 0; index < words.length; index += 1) countPairs(index, 1);

  // The token id of byte b is b.
  const vocab = new Map(BYTE_LEVEL_ALPHABET.map((symbol, id) => [symbol, id]));
  const merges: [string, string][] = [];
  while (vocab.size < vocabSize) {
    let bestKey = '';
    let bestCount = 1; // a pair seen once teaches nothing
    for (const [key, count] of pairCounts) {
      if (count > bestCount || (count === bestCount && bestKey !== '' && key < bestKey)) {
        bestKey = key;
        bestCount = count;
      }
    }
    if (bestKey === '') throw new Error(`corpus too small: only ${vocab.size} of ${vocabSize} tokens learned`);

    const [left, right] = bestKey.split(' ');
    const merged = left + right;
    merges.push([left, right]);
    if (!vocab.has(merged)) vocab.set(merged, vocab.size);
    for (const wordIndex of wordsWithPair.get(bestKey) ?? []) {
      countPairs(wordIndex, -1);
      words[wordIndex].symbols = mergeSymbols(words[wordIndex].symbols, left, right);
      countPairs(wordIndex, 1);
    }
    pairCounts.delete(bestKey);
    wordsWithPair.delete(bestKey);
  }
  return { vocab, merges };
}

function mergeSymbols(symbols: string[], left: string, right: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < symbols.length; i++) {
    if (i + 1 < symbols.length && symbols[i] === left && symbols[i + 1] === right) {
      out.push(left + right);
      i++;
    } else {
      out.push(symbols[i]);
    }
  }
  return out;
}

/** The `tokenizer.json` document; added tokens take the ids right after the learned vocabulary. */
export function tokenizerJson(bpe: LearnedBpe, addedTokens: readonly AddedTokenSpec[]): object {
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: addedTokens.map((token, index) => ({
      id: bpe.vocab.size + index,
      content: token.content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: token.special,
    })),
    normalizer: null, // no NFC: every UTF-8 string must round-trip byte for byte
    pre_tokenizer: PRE_TOKENIZER,
    post_processor: BYTE_LEVEL,
    decoder: BYTE_LEVEL,
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: '',
      end_of_word_suffix: '',
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab: Object.fromEntries(bpe.vocab),
      merges: bpe.merges.map(([left, right]) => pairKey(left, right)),
    },
  };
}
