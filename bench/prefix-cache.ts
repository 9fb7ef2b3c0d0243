/**
 * Prefix cache, two scenarios through the HTTP API, one engine (ENGINES=single):
 * - cold (the tiny model): 16 concurrent chat requests with the same long prompt vs one request, and vs 16
 *   requests with 16 different prompts of the same length (nothing to share). Every phase uses prompts never
 *   seen before, so the cache starts cold each time.
 * - warm (SmolLM2): a long document is sent once (its KV is cached), then one request and a group of 16
 *   concurrent identical requests whose prompts are that document plus a short question of their own
 *   (about 1,400 tokens cached, a dozen new), `max_tokens` 1: the group ÷ one request.
 * Medians of `--rounds` rounds (the phases alternate, so load from elsewhere on the machine hits them alike).
 * Prints the ratios; asserts nothing.
 * Usage: npx tsx bench/prefix-cache.ts [--scenario cold|warm|both] [--words 1860] [--warm-words 1362]
 *        [--concurrent 16] [--rounds 5]
 */
import { parseArgs } from 'node:util';
import { BUILTIN_BASE_MODEL, SMOLLM2_BASE_MODEL } from '../src/config.ts';
import { type E2eServer, startE2eServer } from '../test/helpers/server.ts';
import { longDocument, median, type TimedChat, timedChat } from './measure.ts';

const { values } = parseArgs({
  options: {
    scenario: { type: 'string', default: 'both' },
    words: { type: 'string', default: '1860' },
    'warm-words': { type: 'string', default: '1362' },
    concurrent: { type: 'string', default: '16' },
    rounds: { type: 'string', default: '5' },
  },
});
const CONCURRENT = Number(values.concurrent);
const ROUNDS = Number(values.rounds);
let documents = 0;
/** A long text never sent before (its first words differ), about `words` words. */
const freshDocument = (words: number) => longDocument(`Document ${++documents} of ${documents * 7919}.`, words);

async function group(work: () => Promise<TimedChat>): Promise<{ ms: number; cached: number }> {
  const started = performance.now();
  const results = await Promise.all(Array.from({ length: CONCURRENT }, work));
  return { ms: performance.now() - started, cached: results.reduce((sum, result) => sum + result.cached, 0) };
}

async function cold(e2e: E2eServer): Promise<void> {
  const words = Number(values.words);
  const ask = (content: string) => timedChat(e2e, `${content} Summarise it.`, BUILTIN_BASE_MODEL.id, 4);
  for (let i = 0; i < 2; i += 1) await ask(freshDocument(words)); // warm-up
  const rounds: { one: number; same: number; different: number; cached: number; tokens: number }[] = [];
  for (let r = 0; r < ROUNDS; r += 1) {
    const one = await ask(freshDocument(words));
    const shared = freshDocument(words);
    const same = await group(() => ask(shared));
    const different = await group(() => ask(freshDocument(words)));
    rounds.push({ one: one.ms, same: same.ms, different: different.ms, cached: same.cached, tokens: one.promptTokens });
  }
  const one = median(rounds.map((r) => r.one));
  console.log(
    `cold (${BUILTIN_BASE_MODEL.id}): prompt of ${rounds[0].tokens} tokens, ${CONCURRENT} concurrent requests of 4 tokens; medians of ${ROUNDS} rounds`,
  );
  console.log(`  one request:                 ${one.toFixed(0)} ms`);
  console.log(
    `  ${CONCURRENT} with the same prompt:    ${median(rounds.map((r) => r.same / r.one)).toFixed(2)}x one request (${rounds[0].cached} prompt tokens from the cache per round)`,
  );
  console.log(
    `  ${CONCURRENT} with different prompts:  ${median(rounds.map((r) => r.different / r.one)).toFixed(2)}x one request (nothing to share)`,
  );
}

async function warm(e2e: E2eServer): Promise<void> {
  const words = Number(values['warm-words']);
  let questions = 0;
  const ask = (document: string, question: number) =>
    timedChat(e2e, `${document}\nQuestion ${question}: which word comes first?`, SMOLLM2_BASE_MODEL.id, 1);
  const rounds: { one: number; group: number; tokens: number; cachedOne: number; cachedGroup: number }[] = [];
  for (let r = -1; r < ROUNDS; r += 1) {
    // round -1 warms the server up and is not counted
    const document = freshDocument(words);
    await ask(document, ++questions); // caches the document
    const one = await ask(document, ++questions);
    const question = ++questions;
    const same = await group(() => ask(document, question));
    if (r >= 0)
      rounds.push({
        one: one.ms,
        group: same.ms,
        tokens: one.promptTokens,
        cachedOne: one.cached,
        cachedGroup: same.cached,
      });
  }
  console.log(
    `warm (${SMOLLM2_BASE_MODEL.id}): prompt of ${rounds[0].tokens} tokens, ${rounds[0].cachedOne} of them cached from an earlier request; max_tokens 1; medians of ${ROUNDS} rounds`,
  );
  console.log(`  one request:                 ${median(rounds.map((r) => r.one)).toFixed(0)} ms`);
  console.log(
    `  ${CONCURRENT} identical, concurrent:   ${median(rounds.map((r) => r.group / r.one)).toFixed(2)}x one request (${rounds[0].cachedGroup} prompt tokens from the cache in the group)`,
  );
}

const scenario = values.scenario;
if (!['cold', 'warm', 'both'].includes(scenario))
  throw new Error(`--scenario ${scenario}: expected cold, warm or both`);
const models = [BUILTIN_BASE_MODEL, ...(scenario === 'cold' ? [] : [SMOLLM2_BASE_MODEL])];
const e2e = await startE2eServer({
  env: { ENGINES: 'single', BASE_MODELS: models.map((m) => `${m.id}=${m.path}`).join(',') },
});
try {
  if (scenario !== 'warm') await cold(e2e);
  if (scenario !== 'cold') await warm(e2e);
} finally {
  await e2e.close();
}
