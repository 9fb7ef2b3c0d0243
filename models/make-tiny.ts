/**
 * Builds the tiny built-in chat model as an HF-format folder, from nothing but the recipe in
 * `models/recipe/`: `npx tsx models/make-tiny.ts [--pretrain] [outDir]` (default `models/tiny-chat/`).
 *
 * The tokenizer, config and template are made on every build (seconds). The weights are pretrained
 * by `engine/pretrain.py` on the recipe's synthetic conversations, which takes about 36 minutes on
 * two cores, so the result is committed in `models/pretrained/` under a key of everything it was
 * trained from; a build copies it when the key matches. When the recipe changes, the build stops and
 * asks for `--pretrain`, which trains anew and rewrites the committed files.
 *
 * Deterministic and idempotent: the folder records a hash of the recipe sources and is rebuilt only
 * when that hash changes. The folder is built beside its destination and renamed into place, so
 * concurrent builders (parallel test files) never see a half-written model.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { renderChat } from '../src/conversation/template.ts';
import { learnBpe, tokenizerJson } from './recipe/bpe.ts';
import { buildCorpus } from './recipe/corpus.ts';
import { type PretrainingReport, type PretrainingSet, pretrain, pretrainingSet } from './recipe/pretraining.ts';
import {
  ADDED_TOKENS,
  ARCHITECTURE,
  BPE_CHAT_DOCUMENTS,
  BPE_MERGES,
  CONTEXT_LENGTH,
  CORPUS_SEED,
  PRETRAINING,
  SYNTHETIC_DOCUMENTS,
  VOCAB_SIZE,
  WEIGHTS_SEED,
} from './recipe/recipe.ts';
import { ADDED_TOKEN_ALTERNATION } from './recipe/sequences.ts';
import { llamaSafetensors, parameterCount } from './recipe/weights.ts';

const MODELS_DIR = dirname(fileURLToPath(import.meta.url));
const RECIPE_DIR = join(MODELS_DIR, 'recipe');
export const DEFAULT_TINY_MODEL_DIR = join(MODELS_DIR, 'tiny-chat');
const RECIPE_FILE = 'recipe.json';
/** The weights depend on the training loop too; the rest of the engine is tested to compute the same. */
const PRETRAIN_SCRIPT = join(MODELS_DIR, '..', 'engine', 'pretrain.py');
const PRETRAINED_WEIGHTS = join(MODELS_DIR, 'pretrained', 'tiny-chat.safetensors');
const PRETRAINED_RECORD = join(MODELS_DIR, 'pretrained', 'tiny-chat.json');

interface PretrainedRecord {
  /** Hash of everything the weights were trained from (see `weightsKey`). */
  weights_key: string;
  weights_sha256: string;
  pretraining: PretrainingReport;
}

export interface TinyModel {
  dir: string;
  recipeHash: string;
  /** False when an up-to-date folder was already there. */
  built: boolean;
}

/** Hash of every source that shapes the output, this file included. */
async function recipeHash(): Promise<string> {
  const hash = createHash('sha256');
  const sources = [
    fileURLToPath(import.meta.url),
    ...(await readdir(RECIPE_DIR)).sort().map((f) => join(RECIPE_DIR, f)),
    PRETRAIN_SCRIPT,
    PRETRAINED_RECORD,
  ];
  for (const source of sources) {
    hash.update(relative(MODELS_DIR, source)).update(existsSync(source) ? await readFile(source) : '');
  }
  return hash.digest('hex');
}

const sha256 = (bytes: Buffer | string) => createHash('sha256').update(bytes).digest('hex');

/**
 * Everything the pretrained weights are a function of: the initial weights, the config, the tokenizer
 * and template (which turn the conversations into token ids), the conversations, the settings, and the
 * training loop byte for byte (an edit to engine/pretrain.py, comments included, asks for a new run).
 */
async function weightsKey(dir: string, set: PretrainingSet): Promise<string> {
  const hash = createHash('sha256');
  for (const name of ['config.json', 'tokenizer.json', 'tokenizer_config.json', 'model.safetensors']) {
    hash.update(name).update(await readFile(join(dir, name)));
  }
  hash
    .update(JSON.stringify(set.conversations))
    .update(JSON.stringify(PRETRAINING))
    .update(await readFile(PRETRAIN_SCRIPT));
  return hash.digest('hex');
}

async function readPretrainedRecord(): Promise<PretrainedRecord | undefined> {
  try {
    return JSON.parse(await readFile(PRETRAINED_RECORD, 'utf8')) as PretrainedRecord;
  } catch {
    return undefined;
  }
}

/** Puts the pretrained weights into `dir` (whose `model.safetensors` is the init) and returns their report. */
async function pretrainedWeights(
  dir: string,
  set: PretrainingSet,
  allowPretraining: boolean,
): Promise<PretrainingReport> {
  const key = await weightsKey(dir, set);
  const record = await readPretrainedRecord();
  if (record?.weights_key === key) {
    const weights = await readFile(PRETRAINED_WEIGHTS);
    if (sha256(weights) !== record.weights_sha256) {
      throw new Error(
        `${relative(process.cwd(), PRETRAINED_WEIGHTS)} does not have the bytes its record names: restore it from git`,
      );
    }
    await writeFile(join(dir, 'model.safetensors'), weights);
    return record.pretraining;
  }
  if (!allowPretraining) {
    throw new Error(
      'the committed tiny-model weights (models/pretrained/) were trained from another recipe. ' +
        'Run `npx tsx models/make-tiny.ts --pretrain` (about 36 minutes on two cores) and commit models/pretrained/.',
    );
  }
  const pretraining = await pretrain(dir, set);
  const weights = await readFile(join(dir, 'model.safetensors'));
  await mkdir(dirname(PRETRAINED_WEIGHTS), { recursive: true });
  await writeFile(PRETRAINED_WEIGHTS, weights);
  const newRecord: PretrainedRecord = { weights_key: key, weights_sha256: sha256(weights), pretraining };
  await writeFile(PRETRAINED_RECORD, `${JSON.stringify(newRecord, null, 2)}\n`);
  return pretraining;
}

async function recordedHash(dir: string): Promise<string | undefined> {
  try {
    return (JSON.parse(await readFile(join(dir, RECIPE_FILE), 'utf8')) as { recipe_hash?: string }).recipe_hash;
  } catch {
    return undefined;
  }
}

const tokenId = (content: string) =>
  VOCAB_SIZE - ADDED_TOKENS.length + ADDED_TOKENS.findIndex((t) => t.content === content);

/** Rendered conversations with the added tokens cut out: BPE learns the chat format's text too. */
function chatDocuments(set: PretrainingSet, template: string): string[] {
  const added = new RegExp(ADDED_TOKEN_ALTERNATION, 'g');
  return set.conversations
    .slice(0, BPE_CHAT_DOCUMENTS)
    .map((c) =>
      renderChat({ template, messages: c.messages, tools: c.tools, addGenerationPrompt: false }).replace(added, '\n'),
    );
}

async function writeModel(dir: string, allowPretraining: boolean): Promise<void> {
  const template = (await readFile(join(RECIPE_DIR, 'chat-template.jinja'), 'utf8')).trimEnd();
  const set = pretrainingSet();
  const corpus = buildCorpus(CORPUS_SEED, SYNTHETIC_DOCUMENTS, chatDocuments(set, template));
  const bpe = learnBpe(corpus, VOCAB_SIZE - ADDED_TOKENS.length);
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
    chat_template: template,
    clean_up_tokenization_spaces: false,
    errors: 'replace',
    model_max_length: CONTEXT_LENGTH,
    split_special_tokens: false,
  };
  const generationConfig = { bos_token_id: endOfText, eos_token_id: [imEnd, endOfText], pad_token_id: endOfText };
  const recipe = {
    description:
      'Tiny built-in chat model: byte-level BPE learned from models/recipe/corpus.ts, weights pretrained on the synthetic chat conversations of models/recipe/chat-data.ts',
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
  const pretraining = await pretrainedWeights(dir, set, allowPretraining);
  // Hashed after pretraining, which may have rewritten the committed record the hash covers.
  const complete = { recipe_hash: await recipeHash(), ...recipe, pretraining };
  await writeFile(join(dir, RECIPE_FILE), json(complete)); // last: its presence means the folder is complete
}

/**
 * Makes sure `dir` holds the model of the current recipe; builds it when missing or stale. With
 * `allowPretraining`, weights the recipe no longer matches are trained anew (and committed files rewritten).
 */
export async function ensureTinyModel(
  dir: string = DEFAULT_TINY_MODEL_DIR,
  { allowPretraining = false } = {},
): Promise<TinyModel> {
  const target = resolve(dir);
  const hash = await recipeHash();
  if ((await recordedHash(target)) === hash) return { dir: target, recipeHash: hash, built: false };

  const staging = `${target}.staging-${process.pid}-${Date.now()}`;
  try {
    await writeModel(staging, allowPretraining);
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
  const args = process.argv.slice(2);
  const allowPretraining = args.includes('--pretrain');
  const model = await ensureTinyModel(
    args.find((arg) => !arg.startsWith('--')),
    { allowPretraining },
  );
  const verb = model.built ? `built in ${((Date.now() - started) / 1000).toFixed(1)}s` : 'up to date';
  console.log(`tiny chat model ${verb}: ${model.dir}`);
}
