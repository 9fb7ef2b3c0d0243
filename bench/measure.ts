/**
 * What the benchmarks share: the median of a run's figures, long documents no request has sent before (so the
 * prefix cache starts cold on each), one chat completion timed through the HTTP API, and the sampled groups an RL
 * job trains on.
 */
import { sampleGroup } from '../test/helpers/rollouts.ts';
import type { E2eServer } from '../test/helpers/server.ts';

export const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

const WORDS = [
  'weather',
  'river',
  'house',
  'story',
  'evening',
  'garden',
  'music',
  'window',
  'morning',
  'letter',
  'bridge',
  'forest',
];

/** `words` words after `tag`: a tag never used before makes a document no cached prefix covers past it. */
export function longDocument(tag: string, words: number): string {
  return `${tag} ${Array.from({ length: words }, (_, i) => WORDS[(i * 7 + (i >> 3)) % WORDS.length]).join(' ')}.`;
}

export interface TimedChat {
  ms: number;
  promptTokens: number;
  /** Prompt tokens the answer says came from the prefix cache. */
  cached: number;
}

/** One greedy chat completion of `content` on `model`, timed from the request to the whole answer. */
export async function timedChat(e2e: E2eServer, content: string, model: string, maxTokens: number): Promise<TimedChat> {
  const started = performance.now();
  const response = await e2e.api('POST', '/v1/chat/completions', {
    model,
    messages: [{ role: 'user', content }],
    max_tokens: maxTokens,
    temperature: 0,
  });
  if (response.status !== 200) throw new Error(`chat failed: ${response.status} ${JSON.stringify(response.body)}`);
  const usage = response.body.usage;
  return {
    ms: performance.now() - started,
    promptTokens: usage.prompt_tokens,
    cached: usage.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

/** `count` groups of 4 sampled answers to a question of their own, every other answer rewarded: an RL job's data. */
export async function questionGroups(e2e: E2eServer, model: string, count: number) {
  const groups = [];
  for (let g = 0; g < count; g += 1)
    groups.push(
      await sampleGroup(e2e, model, `Question number ${g}: what is ${g} + ${g}?`, 4, (_, i) => i % 2, g * 10),
    );
  return groups;
}
