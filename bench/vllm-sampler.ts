/**
 * Our engine vs vLLM as the sampler, through our HTTP API, same model (SmolLM2-135M, fp32), same machine,
 * one run: one server serves the model under two base ids, one sampled by our engine and one by a vLLM child
 * (SAMPLER_ENGINES), so every request differs only in which engine samples it. Measured per engine:
 * - decode tokens/s of 1 stream and of 32 concurrent streams (`ignore_eos`, from each stream's first token to its last);
 * - p50 time to first token of short requests with prompts never seen before, one at a time;
 * - a group of 16 concurrent identical requests after a warm prefix (~1,400 tokens cached, `max_tokens` 1) ÷ one such request;
 * - the step-0 sampler–trainer gap: an RL job on completions that engine sampled; its first step's
 *   `sampler_logprob_gap` (mean |trainer − sampler| logprob per token; our engine trains in both cases).
 * Prints the figures and the vLLM ÷ ours ratios; asserts nothing. Needs .venv-vllm (VLLM_PYTHON).
 * Usage: npx tsx bench/vllm-sampler.ts [--tokens 128] [--streams 32] [--group 16]   (env DTYPE, VLLM_ARGS pass through)
 */
import { parseArgs } from 'node:util';
import { SMOLLM2_BASE_MODEL } from '../src/config.ts';
import { ssePayloads } from '../test/helpers/api.ts';
import { sampleGroup, submitRl, waitForJob } from '../test/helpers/rollouts.ts';
import { type E2eServer, startE2eServer } from '../test/helpers/server.ts';
import { VLLM_PYTHON } from '../test/helpers/vllm-process.ts';
import { longDocument, median, timedChat } from './measure.ts';

const { values } = parseArgs({
  options: {
    tokens: { type: 'string', default: '128' },
    streams: { type: 'string', default: '32' },
    group: { type: 'string', default: '16' },
  },
});
const TOKENS = Number(values.tokens);
const STREAMS = Number(values.streams);
const GROUP = Number(values.group);
const ENGINES = { ours: 'smol/ours', vllm: 'smol/vllm' } as const;
let fresh = 0;

interface Streamed {
  ttftMs: number;
  decodeMs: number;
  tokens: number;
}

/** One streamed chat completion: time to its first token, then its decode time and token count. */
async function streamed(e2e: E2eServer, model: string, content: string, maxTokens: number): Promise<Streamed> {
  const started = performance.now();
  const response = await fetch(`${e2e.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${e2e.key}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      model,
      messages: [{ role: 'user', content }],
      max_tokens: maxTokens,
      ignore_eos: true,
      temperature: 1,
      seed: 1,
      stream: true,
      return_token_ids: true,
    }),
  });
  if (response.status !== 200) throw new Error(`chat failed: ${response.status} ${await response.text()}`);
  let first = 0;
  let tokens = 0;
  for await (const data of ssePayloads(response)) {
    if (data === '[DONE]') continue;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(JSON.stringify(chunk.error));
    const ids = chunk.choices?.[0]?.token_ids?.length ?? 0;
    if (ids > 0 && first === 0) first = performance.now();
    tokens += ids;
  }
  return { ttftMs: first - started, decodeMs: performance.now() - first, tokens };
}

async function decodeRate(e2e: E2eServer, model: string, streams: number): Promise<number> {
  const results = await Promise.all(
    Array.from({ length: streams }, () => streamed(e2e, model, `Tell a story number ${++fresh}.`, TOKENS)),
  );
  const started = Math.min(...results.map((r) => r.ttftMs));
  const ended = Math.max(...results.map((r) => r.ttftMs + r.decodeMs));
  return results.reduce((sum, r) => sum + r.tokens, 0) / ((ended - started) / 1000);
}

async function ttft(e2e: E2eServer, model: string): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < 7; i += 1)
    times.push((await streamed(e2e, model, `Question ${++fresh}: what is ${fresh} plus ${fresh * 3}?`, 1)).ttftMs);
  return median(times);
}

const chatMs = async (e2e: E2eServer, model: string, content: string) => (await timedChat(e2e, content, model, 1)).ms;

/** A ~1,400-token document sent once, then one request and a group of identical ones on it (each a question of its own). */
async function warmGroup(e2e: E2eServer, model: string): Promise<number> {
  const document = longDocument(`Document ${++fresh}.`, 1362);
  await chatMs(e2e, model, `${document} Summarise it.`);
  const one = median([
    await chatMs(e2e, model, `${document} Question A.`),
    await chatMs(e2e, model, `${document} Question B.`),
    await chatMs(e2e, model, `${document} Question C.`),
  ]);
  const started = performance.now();
  await Promise.all(Array.from({ length: GROUP }, () => chatMs(e2e, model, `${document} Question D.`)));
  return (performance.now() - started) / one;
}

/** The first step's sampler_logprob_gap of an RL job on completions `base` sampled. */
async function stepZeroGap(e2e: E2eServer, base: string, name: string): Promise<number> {
  const created = await e2e.api('POST', '/v1/preview/models', { project: 'bench', name, base_model: base });
  const model = `local/bench/${name}`;
  const groups = [
    await sampleGroup(e2e, model, 'Name a colour.', 4, (_, i) => i % 2),
    await sampleGroup(e2e, model, 'Say hello.', 4, (_, i) => i % 2, 10),
  ];
  const done = await waitForJob(
    e2e,
    await submitRl(e2e, created.body.id, groups, { learning_rate: 1e-6 }),
    15 * 60_000,
  );
  if (done.status !== 'COMPLETED') throw new Error(`RL job ${done.status}: ${JSON.stringify(done.error)}`);
  const checkpoints = (await e2e.api('GET', `/v1/preview/models/${created.body.id}/checkpoints`)).body.data as {
    step: number;
    metrics: Record<string, number>;
  }[];
  return (
    checkpoints.find((checkpoint) => checkpoint.step === done.checkpoint_step)?.metrics.sampler_logprob_gap ??
    Number.NaN
  );
}

async function main(): Promise<void> {
  const e2e = await startE2eServer({
    env: {
      BASE_MODELS: `${ENGINES.ours}=${SMOLLM2_BASE_MODEL.path},${ENGINES.vllm}=${SMOLLM2_BASE_MODEL.path}`,
      SAMPLER_ENGINES: `${ENGINES.vllm}=vllm`,
      ENGINES: 'single', // our engine with every core, as vLLM has them
      VLLM_PYTHON,
      VLLM_MAX_LORA_RANK: '8',
      MAX_MODEL_LEN: '2048',
      KV_CACHE_MEMORY_BYTES: String(2 ** 30),
      // A GPU host (bench/gpu_check.sh) sets DTYPE=bfloat16 and leaves the trainer its share with VLLM_ARGS.
      ...Object.fromEntries(
        ['DTYPE', 'VLLM_ARGS'].filter((name) => process.env[name]).map((name) => [name, process.env[name]!]),
      ),
    },
  });
  try {
    const rows: Record<string, Record<string, number>> = {};
    for (const [kind, model] of Object.entries(ENGINES)) {
      await streamed(e2e, model, 'Warm up.', 8);
      rows[kind] = {
        'decode tok/s, 1 stream': await decodeRate(e2e, model, 1),
        [`decode tok/s, ${STREAMS} streams`]: await decodeRate(e2e, model, STREAMS),
        'p50 TTFT ms': await ttft(e2e, model),
        [`${GROUP} identical after warm prefix ÷ one`]: await warmGroup(e2e, model),
        'step-0 |trainer − sampler| logprob/token': await stepZeroGap(e2e, model, `gap-${kind}`),
      };
    }
    console.log(
      `SmolLM2-135M ${process.env.DTYPE ?? 'float32'}, ${TOKENS} tokens per stream, through our HTTP API (ENGINES=single: our engine samples and trains; vLLM beside it)`,
    );
    console.log(['figure', 'ours', 'vLLM', 'vLLM ÷ ours'].join('\t'));
    for (const figure of Object.keys(rows.ours)) {
      const [ours, vllm] = [rows.ours[figure], rows.vllm[figure]];
      console.log([figure, ours.toPrecision(4), vllm.toPrecision(4), (vllm / ours).toFixed(2)].join('\t'));
    }
  } finally {
    await e2e.close();
  }
}

await main();
