/**
 * Loads an HF tokenizer (`tokenizer.json` + `tokenizer_config.json`) from a model folder, once per
 * folder, and wraps `@huggingface/tokenizers` with the few operations the chat layer needs:
 * encode, decode, the ids of added and special tokens, and the raw bytes of a token.
 */
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { Tokenizer } from '@huggingface/tokenizers';

/** GPT-2's reversible byte → printable character table used by ByteLevel tokenizers; index = byte. */
export const BYTE_LEVEL_ALPHABET: readonly string[] = (() => {
  const printable = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  let shifted = 0;
  return Array.from({ length: 256 }, (_, b) => String.fromCodePoint(printable(b) ? b : 256 + shifted++));
})();
const BYTE_OF_CHARACTER = new Map(BYTE_LEVEL_ALPHABET.map((character, byte) => [character, byte]));
const utf8 = new TextEncoder();

/**
 * The part of `@huggingface/tokenizers` we use. Its bundled .d.ts files import without file
 * extensions, which NodeNext resolution rejects, so the class arrives untyped: we type it here.
 */
interface HfTokenizer {
  encode(text: string, options: { add_special_tokens: boolean }): { ids: number[] };
  decode(ids: number[], options: { skip_special_tokens: boolean }): string;
  token_to_id(token: string): number | undefined;
  id_to_token(id: number): string | undefined;
  get_vocab(withAddedTokens: boolean): Map<string, number>;
}
const HfTokenizerClass: new (tokenizerJson: object, tokenizerConfig: object) => HfTokenizer = Tokenizer;

interface AddedTokenEntry {
  id: number;
  content: string;
  special?: boolean;
}

interface TokenizerFiles {
  tokenizer: { added_tokens?: AddedTokenEntry[]; decoder?: { type?: string } | null };
  config: Record<string, unknown>;
}

/** `eos_token` and friends are either a string or an AddedToken-like object in tokenizer_config.json. */
function tokenContent(value: unknown): string | undefined {
  if (typeof value === 'string') return value;
  if (value && typeof value === 'object' && typeof (value as { content?: unknown }).content === 'string') {
    return (value as { content: string }).content;
  }
  return undefined;
}

/** transformers' SPECIAL_TOKENS_ATTRIBUTES: the named tokens every chat template render receives. */
const TEMPLATE_TOKEN_NAMES = [
  'bos_token',
  'eos_token',
  'unk_token',
  'sep_token',
  'pad_token',
  'cls_token',
  'mask_token',
];

export class ChatTokenizer {
  /** Every added token (special or not) by content. */
  readonly addedTokenIds: ReadonlyMap<string, number>;
  /** Ids that `skipSpecialTokens` drops. */
  readonly specialTokenIds: ReadonlySet<number>;
  readonly eosToken: string | undefined;
  readonly eosTokenId: number | undefined;
  readonly padTokenId: number | undefined;
  readonly bosTokenId: number | undefined;
  /** `add_bos_token` in tokenizer_config.json: prompts must start with the BOS token. */
  readonly addBosToken: boolean;
  /** The named special token strings a chat template sees (`bos_token`, `eos_token`, ...), as transformers passes them. */
  readonly templateTokens: Readonly<Record<string, string>>;
  readonly chatTemplate: string | undefined;
  /** Highest token id + 1. */
  readonly vocabSize: number;
  private readonly tokenizer: HfTokenizer;
  private readonly byteLevel: boolean;
  private idsByBytes: Map<string, number> | undefined;

  constructor(
    readonly folder: string,
    files: TokenizerFiles,
  ) {
    this.tokenizer = new HfTokenizerClass(files.tokenizer, files.config);
    const added = files.tokenizer.added_tokens ?? [];
    this.addedTokenIds = new Map(added.map((t) => [t.content, t.id]));
    this.specialTokenIds = new Set(added.filter((t) => t.special).map((t) => t.id));
    this.byteLevel = files.tokenizer.decoder?.type === 'ByteLevel';
    this.eosToken = tokenContent(files.config.eos_token);
    this.eosTokenId = this.eosToken === undefined ? undefined : this.tokenId(this.eosToken);
    const padToken = tokenContent(files.config.pad_token);
    this.padTokenId = padToken === undefined ? undefined : this.tokenId(padToken);
    this.templateTokens = Object.fromEntries(
      TEMPLATE_TOKEN_NAMES.flatMap((name) => {
        const content = tokenContent(files.config[name]);
        return content === undefined ? [] : [[name, content]];
      }),
    );
    const bosToken = this.templateTokens.bos_token;
    this.bosTokenId = bosToken === undefined ? undefined : this.tokenId(bosToken);
    this.addBosToken = files.config.add_bos_token === true;
    const template = files.config.chat_template;
    this.chatTemplate = typeof template === 'string' ? template : undefined;
    let highestId = -1;
    for (const id of this.tokenizer.get_vocab(true).values()) highestId = Math.max(highestId, id);
    this.vocabSize = highestId + 1;
  }

  /** Special tokens written in the text (e.g. by a chat template) become their single ids. */
  encode(text: string, options: { addSpecialTokens?: boolean } = {}): number[] {
    return this.tokenizer.encode(text, { add_special_tokens: options.addSpecialTokens ?? false }).ids;
  }

  decode(ids: readonly number[], options: { skipSpecialTokens?: boolean } = {}): string {
    if (ids.length === 0) return ''; // the library rejects an empty list
    return this.tokenizer.decode([...ids], { skip_special_tokens: options.skipSpecialTokens ?? false });
  }

  tokenId(content: string): number | undefined {
    return this.addedTokenIds.get(content) ?? this.tokenizer.token_to_id(content);
  }

  /**
   * The bytes a token stands for, which may be part of a UTF-8 character: what incremental
   * detokenization and OpenAI's logprob `bytes` need. Undefined for an id outside the vocabulary.
   */
  tokenBytes(id: number): Uint8Array | undefined {
    const piece = this.tokenizer.id_to_token(id);
    if (piece === undefined) return undefined;
    if (this.addedTokenIds.has(piece)) return utf8.encode(piece);
    if (!this.byteLevel) return utf8.encode(this.decode([id]));
    return Uint8Array.from([...piece], (character) => {
      const byte = BYTE_OF_CHARACTER.get(character);
      if (byte === undefined) throw new Error(`token ${id} of ${this.folder} is not byte-level: ${piece}`);
      return byte;
    });
  }

  /**
   * The token whose bytes these are (an OpenAI logprob entry's `bytes`), undefined when none is. Where an
   * added token spells the same bytes as a vocabulary entry, the added token wins: samplers emit it whole.
   */
  tokenIdOfBytes(bytes: readonly number[]): number | undefined {
    if (!this.idsByBytes) {
      const key = (value: Uint8Array) => Buffer.from(value.buffer, value.byteOffset, value.length).toString('latin1');
      const map = new Map<string, number>();
      for (let id = 0; id < this.vocabSize; id += 1) {
        const piece = this.tokenizer.id_to_token(id);
        if (
          piece === undefined ||
          this.addedTokenIds.has(piece) ||
          (this.byteLevel && [...piece].some((c) => !BYTE_OF_CHARACTER.has(c)))
        )
          continue;
        const value = this.tokenBytes(id)!;
        if (!map.has(key(value))) map.set(key(value), id);
      }
      for (const [content, id] of this.addedTokenIds) map.set(key(utf8.encode(content)), id);
      this.idsByBytes = map;
    }
    if (!bytes.every((byte) => Number.isInteger(byte) && byte >= 0 && byte < 256)) return undefined;
    return this.idsByBytes.get(Buffer.from(bytes).toString('latin1'));
  }
}

const cache = new Map<string, Promise<ChatTokenizer>>();

async function readTokenizer(folder: string): Promise<ChatTokenizer> {
  const readJson = async (name: string) => JSON.parse(await readFile(join(folder, name), 'utf8')) as unknown;
  const [tokenizer, config] = await Promise.all([readJson('tokenizer.json'), readJson('tokenizer_config.json')]);
  return new ChatTokenizer(folder, {
    tokenizer: tokenizer as TokenizerFiles['tokenizer'],
    config: config as TokenizerFiles['config'],
  });
}

/** One tokenizer per folder for the life of the process; a failed load is not cached. */
export function loadTokenizer(folder: string): Promise<ChatTokenizer> {
  const key = resolve(folder);
  let loading = cache.get(key);
  if (!loading) {
    loading = readTokenizer(key);
    cache.set(key, loading);
    loading.catch(() => cache.delete(key));
  }
  return loading;
}
