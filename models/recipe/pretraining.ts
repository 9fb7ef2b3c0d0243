/**
 * Pretrains a freshly initialised tiny model folder on the synthetic chat conversations and measures
 * what it learned: the conversations are rendered and tokenized here (the model's own template and
 * tokenizer, as the service renders prompts), the engine's `engine.pretrain` trains every weight, and
 * the held-out evaluation is decoded by the engine and scored here.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadTokenizer } from '../../src/conversation/tokenizer.ts';
import { findEnginePython } from '../../src/engine/python.ts';
import {
  type Conversation,
  type EvalItem,
  evaluationItems,
  heldOutProblems,
  trainingConversations,
} from './chat-data.ts';
import { PRETRAINING } from './recipe.ts';
import { ConversationTokenizer, renderPrompt } from './sequences.ts';

/** What `engine.pretrain` prints on its last line. */
interface PretrainSummary {
  steps: number;
  sequences: number;
  target_tokens: number;
  first_loss: number;
  final_loss: number;
  seconds: number;
}

export interface PretrainingReport extends PretrainSummary {
  /** Per evaluation kind: share answered exactly right, greedily and at temperature 1. */
  accuracy: Record<EvalItem['kind'], { items: number; greedy: number; sampled: number }>;
  /** Share of greedy answers that end with `<|im_end|>` within their token budget. */
  ends_turn: number;
}

/** Exact answers; a tool item is right when the answer is one call with the expected name and arguments. */
function isCorrect(item: EvalItem, text: string): boolean {
  if (item.kind !== 'tool') return text.trim() === item.expected;
  const call = /^<tool_call>\n(.*)\n<\/tool_call>$/s.exec(text.trim());
  if (!call) return false;
  try {
    return JSON.stringify(JSON.parse(call[1])) === item.expected;
  } catch {
    return false;
  }
}

function runPython(python: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    // stderr is inherited: the progress bar shows in the installer's output.
    const child = spawn(python, ['-m', 'engine.pretrain', ...args], {
      cwd: join(import.meta.dirname, '..', '..'),
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let stdout = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.on('error', reject);
    child.on('close', (code) =>
      code === 0 ? resolve(stdout) : reject(new Error(`engine.pretrain exited with ${code}`)),
    );
  });
}

export interface PretrainingSet {
  conversations: Conversation[];
  /** Held out: no training conversation asks their arithmetic problems. */
  evaluation: EvalItem[];
}

export function pretrainingSet(): PretrainingSet {
  const p = PRETRAINING;
  const heldOut = heldOutProblems(p.evalSeed, p.evalArithmetic, p.arithmetic);
  return {
    conversations: trainingConversations(p.seed, p.conversations, p.arithmetic, p.mix, heldOut),
    evaluation: evaluationItems(p.evalSeed, p.arithmetic, p.evalArithmetic),
  };
}

/** Trains `modelDir/model.safetensors` in place and returns the measured report. */
export async function pretrain(
  modelDir: string,
  { conversations, evaluation: items }: PretrainingSet,
): Promise<PretrainingReport> {
  const tokenizer = await loadTokenizer(modelDir);
  const template = tokenizer.chatTemplate ?? '';
  const imEnd = tokenizer.tokenId('<|im_end|>');
  const p = PRETRAINING;

  const scratch = await mkdtemp(join(tmpdir(), 'tiny-pretrain-'));
  try {
    const sequences = new ConversationTokenizer(tokenizer, template);
    const data = conversations.map((c) => JSON.stringify(sequences.tokenize(c))).join('\n');
    const prompts = items.map((item) => tokenizer.encode(renderPrompt(template, item.messages, item.tools)));
    const evalLines = prompts.map((prompt) => JSON.stringify({ prompt, max_tokens: p.evalMaxTokens })).join('\n');
    await writeFile(join(scratch, 'data.jsonl'), `${data}\n`);
    await writeFile(join(scratch, 'eval.jsonl'), `${evalLines}\n`);

    const python = process.env.ENGINE_PYTHON || (await findEnginePython());
    const stdout = await runPython(python, [
      '--model',
      modelDir,
      '--data',
      join(scratch, 'data.jsonl'),
      '--steps',
      String(p.steps),
      '--seed',
      String(p.seed),
      '--lr',
      String(p.learningRate),
      '--warmup',
      String(p.warmupSteps),
      '--batch-tokens',
      String(p.batchTokens),
      '--row-tokens',
      p.rowTokens.join(','),
      '--eval',
      join(scratch, 'eval.jsonl'),
      '--eval-out',
      join(scratch, 'eval-out.json'),
      '--eval-samples',
      String(p.evalSamples),
      '--save-dtype',
      p.saveDtype,
    ]);
    const summary = JSON.parse(stdout.trim().split('\n').at(-1) ?? '') as PretrainSummary;
    const outputs = JSON.parse(await readFile(join(scratch, 'eval-out.json'), 'utf8')) as {
      greedy: number[][];
      sampled: number[][][];
    };

    const answer = (ids: number[]) => tokenizer.decode(ids.filter((id) => id !== imEnd));
    const accuracy = {} as PretrainingReport['accuracy'];
    items.forEach((item, i) => {
      accuracy[item.kind] ??= { items: 0, greedy: 0, sampled: 0 };
      const entry = accuracy[item.kind];
      entry.items += 1;
      entry.greedy += isCorrect(item, answer(outputs.greedy[i])) ? 1 : 0;
      const samples = outputs.sampled[i] ?? [];
      entry.sampled += samples.filter((ids) => isCorrect(item, answer(ids))).length / Math.max(1, samples.length);
    });
    const round = (x: number) => Math.round(x * 1000) / 1000;
    for (const entry of Object.values(accuracy)) {
      entry.greedy = round(entry.greedy / entry.items);
      entry.sampled = round(entry.sampled / entry.items);
    }
    const endsTurn = outputs.greedy.filter((ids) => ids.at(-1) === imEnd).length / outputs.greedy.length;
    return {
      steps: summary.steps,
      sequences: summary.sequences,
      target_tokens: summary.target_tokens,
      first_loss: round(summary.first_loss),
      final_loss: round(summary.final_loss),
      seconds: Math.round(summary.seconds),
      accuracy,
      ends_turn: round(endsTurn),
    };
  } finally {
    await rm(scratch, { recursive: true, force: true });
  }
}
