/**
 * Builds the tiny built-in chat model as an HF-format folder, from nothing but the recipe in
 * `models/recipe/`: `npx tsx models/make-tiny.ts [outDir]` (default `models/tiny-chat/`).
 *
 * Deterministic and idempotent: the folder records a hash of the recipe sources and is rebuilt only
 * when that hash changes. The folder is built beside its destination and renamed into place, so
 * concurrent builders (parallel test files) never see a half-written model.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { learnBpe, tokenizerJson } from './recipe/bpe.ts';
import { buildCorpus } from './recipe/corpus.ts';
import {
  ADDED_TOKENS,
  ARCHITECTURE,
  BPE_MERGES,
  CONTEXT_LENGTH,
  CORPUS_SEED,
  SYNTHETIC_DOCUMENTS,
  VOCAB_SIZE,
  WEIGHTS_SEED,
} from './recipe/recipe.ts';
import { llamaSafetensors, parameterCount } from './recipe/weights.ts';

const MODELS_DIR = dirname(fileURLToPath(import.meta.url));
const RECIPE_DIR = join(MODELS_DIR, 'recipe');
export const DEFAULT_TINY_MODEL_DIR = join(MODELS_DIR, 'tiny-chat');
const RECIPE_FILE = 'recipe.json';

export interface TinyModel {
  dir: string;
  recipeHash: string;
  /** False when an up-to-date folder was already there. */
  built: boolean;
}

/** Hash of every source that shapes the output, this file included. */
async function recipeHash(): Promise<string> {
  const hash = createHash('sha256');
  const sources = [fileURLToPath(import.meta.url), ...(await readdir(RECIPE_DIR)).sort().map((f) => join(RECIPE_DIR, f))];
  for (const source of sources) hash.update(source.slice(MODELS_DIR.length)).update(await readFile(source));
  return hash.digest('hex');
}

async function recordedHash(dir: string): Promise<string | undefined> {
  try {
    return (JSON.parse(await readFile(join(dir, RECIPE_FILE), 'utf8')) as { recipe_hash?: string }).recipe_hash;
  } catch {
    return undefined;
  }
}

const tokenId = (content: string) => VOCAB_SIZE - ADDED_TOKENS.length + ADDED_TOKENS.findIndex((t) => t.content === content);

async function writeModel(dir: string, hash: string): Promise<void> {
  const bpe = learnBpe(buildCorpus(CORPUS_SEED, SYNTHETIC_DOCUMENTS), VOCAB_SIZE - ADDED_TOKENS.length);
  const tokenizer = tokenizerJson(bpe, ADDED_TOKENS);
  const endOfText = tokenId('<|endoftext|>');
  const imEnd = tokenId('<|im_end|>');
  const shape = { vocab_size: VOCAB_SIZE, ...ARCHITECTURE };

  const config = {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    ...ARCHITECTURE,
    vocab_size: VOCAB_SIZE,
    max_position_embeddings: CONTEXT_LENGTH,
    hidden_act: 'silu',
    rope_scaling: null,
    attention_bias: false,
    attention_dropout: 0.0,
    mlp_bias: false,
    tie_word_embeddings: true,
    bos_token_id: endOfText,
    eos_token_id: imEnd,
    torch_dtype: 'float32',
    use_cache: true,
  };
  const tokenizerConfig = {
    tokenizer_class: 'Qwen2Tokenizer',
    add_bos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: Object.fromEntries(
      ADDED_TOKENS.map((t) => [
        String(tokenId(t.content)),
        { content: t.content, lstrip: false, normalized: false, rstrip: false, single_word: false, special: t.special },
      ]),
    ),
    additional_special_tokens: ADDED_TOKENS.filter((t) => t.special).map((t) => t.content),
    bos_token: null,
    eos_token: '<|im_end|>',
    pad_token: '<|endoftext|>',
    unk_token: null,
    chat_template: (await readFile(join(RECIPE_DIR, 'chat-template.jinja'), 'utf8')).trimEnd(),
    clean_up_tokenization_spaces: false,
    errors: 'replace',
    model_max_length: CONTEXT_LENGTH,
    split_special_tokens: false,
  };
  const generationConfig = { bos_token_id: endOfText, eos_token_id: [imEnd, endOfText], pad_token_id: endOfText };
  const recipe = {
    recipe_hash: hash,
    description: 'Tiny built-in chat model: byte-level BPE learned from models/recipe/corpus.ts, random-init weights',
    num_parameters: parameterCount(shape),
    bpe_merges_target: BPE_MERGES,
    corpus_seed: CORPUS_SEED,
    weights_seed: WEIGHTS_SEED,
  };

  const json = (value: unknown) => `${JSON.stringify(value, null, 2)}\n`;
  await mkdir(dir, { recursive: true });
  await writeFile(join(dir, 'config.json'), json(config));
  await writeFile(join(dir, 'tokenizer.json'), json(tokenizer));
  await writeFile(join(dir, 'tokenizer_config.json'), json(tokenizerConfig));
  await writeFile(join(dir, 'generation_config.json'), json(generationConfig));
  await writeFile(join(dir, 'model.safetensors'), llamaSafetensors(shape, WEIGHTS_SEED));
  await writeFile(join(dir, RECIPE_FILE), json(recipe)); // last: its presence means the folder is complete
}

/** Makes sure `dir` holds the model of the current recipe; builds it when missing or stale. */
export async function ensureTinyModel(dir: string = DEFAULT_TINY_MODEL_DIR): Promise<TinyModel> {
  const target = resolve(dir);
  const hash = await recipeHash();
  if ((await recordedHash(target)) === hash) return { dir: target, recipeHash: hash, built: false };

  const staging = `${target}.staging-${process.pid}-${Date.now()}`;
  try {
    await writeModel(staging, hash);
    if (existsSync(target)) {
      if ((await recordedHash(target)) === hash) return { dir: target, recipeHash: hash, built: false };
      await rm(target, { recursive: true, force: true });
    }
    await rename(staging, target);
  } catch (error) {
    // Another builder may have renamed its identical folder into place first.
    if ((await recordedHash(target)) !== hash) throw error;
  } finally {
    await rm(staging, { recursive: true, force: true });
  }
  return { dir: target, recipeHash: hash, built: true };
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const started = Date.now();
  const model = await ensureTinyModel(process.argv[2]);
  const verb = model.built ? `built in ${((Date.now() - started) / 1000).toFixed(1)}s` : 'up to date';
  console.log(`tiny chat model ${verb}: ${model.dir}`);
}
