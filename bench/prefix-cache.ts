/**
 * Prefix cache (issue 16): 16 concurrent chat requests with the same long prompt vs one request, and vs 16
 * requests with 16 different prompts of the same length (nothing to share). Every phase uses prompts never
 * seen before, so the cache starts cold each time. Medians of `--rounds` rounds (the phases alternate, so
 * load from elsewhere on the machine hits them alike). Prints the ratios; asserts nothing.
 * Usage: npx tsx bench/prefix-cache.ts [--words 1860] [--concurrent 16] [--rounds 5]
 */
import { parseArgs } from 'node:util';
import { startE2eServer, type E2eServer } from '../test/helpers/server.ts';

const { values } = parseArgs({ options: { words: { type: 'string', default: '1860' }, concurrent: { type: 'string', default: '16' }, rounds: { type: 'string', default: '5' } } });
const WORDS = Number(values.words);
const CONCURRENT = Number(values.concurrent);
const ROUNDS = Number(values.rounds);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const VOCABULARY = ['weather', 'river', 'house', 'story', 'evening', 'garden', 'music', 'window', 'morning', 'letter', 'bridge', 'forest'];

let prompts = 0;
/** A long prompt never sent before (its first words differ), about WORDS words. */
function freshPrompt(): string {
  const tag = `Document ${++prompts} of ${prompts * 7919}.`;
  return `${tag} ${Array.from({ length: WORDS }, (_, i) => VOCABULARY[(i * 7 + (i >> 3)) % VOCABULARY.length]).join(' ')}. Summarise it.`;
}

async function chat(e2e: E2eServer, content: string): Promise<{ ms: number; promptTokens: number; cached: number }> {
  const started = performance.now();
  const response = await e2e.api('POST', '/v1/chat/completions', { messages: [{ role: 'user', content }], max_tokens: 4, temperature: 0 });
  if (response.status !== 200) throw new Error(`chat failed: ${response.status} ${JSON.stringify(response.body)}`);
  const usage = response.body.usage;
  return { ms: performance.now() - started, promptTokens: usage.prompt_tokens, cached: usage.prompt_tokens_details?.cached_tokens ?? 0 };
}

async function wall(work: () => Promise<{ cached: number }[]>): Promise<{ ms: number; cached: number }> {
  const started = performance.now();
  const results = await work();
  return { ms: performance.now() - started, cached: results.reduce((sum, result) => sum + result.cached, 0) };
}

const e2e = await startE2eServer({ env: { ENGINES: 'single' } });
try {
  for (let i = 0; i < 2; i += 1) await chat(e2e, freshPrompt()); // warm-up
  const rounds: { one: number; same: number; different: number; cached: number; tokens: number }[] = [];
  for (let r = 0; r < ROUNDS; r += 1) {
    const one = await chat(e2e, freshPrompt());
    const shared = freshPrompt();
    const same = await wall(() => Promise.all(Array.from({ length: CONCURRENT }, () => chat(e2e, shared))));
    const different = await wall(() => Promise.all(Array.from({ length: CONCURRENT }, () => chat(e2e, freshPrompt()))));
    rounds.push({ one: one.ms, same: same.ms, different: different.ms, cached: same.cached, tokens: one.promptTokens });
  }
  const one = median(rounds.map((r) => r.one));
  const same = median(rounds.map((r) => r.same / r.one));
  const different = median(rounds.map((r) => r.different / r.one));
  console.log(`prompt of ${rounds[0].tokens} tokens, ${CONCURRENT} concurrent requests of 4 tokens; medians of ${ROUNDS} rounds`);
  console.log(`one request:                 ${one.toFixed(0)} ms`);
  console.log(`${CONCURRENT} with the same prompt:    ${same.toFixed(2)}x one request (${rounds[0].cached} prompt tokens from the cache per round)`);
  console.log(`${CONCURRENT} with different prompts:  ${different.toFixed(2)}x one request (nothing to share)`);
} finally {
  await e2e.close();
}
