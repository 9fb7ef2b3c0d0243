/**
 * Weights must never cross entities, so the fuzz run also injects adapters no engine should compute with and
 * watches the other entity's answers. The sampler is a TCP engine started with the test-only
 * --skip-adapter-value-check (the server never passes it): the first entity imports its valid export a few times
 * and the run overwrites each copy's safetensors on disk with NaN, infinity or a huge value before first use, so
 * the adapter is resident instead of refused at load. The second entity's temperature-0 answers (the base model and
 * its own adapter) are taken before the requests, in rounds during them (each beside chats on the injected models),
 * and after: any change of tokens, or of a logprob beyond batching's rounding, is a cross-entity change.
 */
import fs from 'node:fs';
import path from 'node:path';
import { withValue } from '../helpers/adapters.ts';
import { httpApi } from '../helpers/api.ts';
import { BASE_MODEL, type Entity, PROJECT } from './world.ts';

/**
 * What the sampler gets injected: NaN (which once corrupted other tenants' rows of its batch), an infinity, and a
 * finite value far beyond the bound.
 */
const INJECTED = [
  ['nan', Number.NaN],
  ['inf', Infinity],
  ['huge', 1e38],
] as const;
/** Logprobs of one answer may differ by batching's float rounding (a batch attends over its longest row's span). */
const LOGPROB_TOLERANCE = 1e-4;
/** Between rounds, so the probes add to the fuzzer's load rather than dominate it. */
const ROUND_PAUSE_MS = 1000;

export interface Answer {
  model: string;
  status: number;
  tokens: string[];
  logprobs: number[];
}

/** Imports `entity`'s export once per injected value and overwrites its weights on disk; answers the models' names. */
export async function injectBadAdapters(url: string, dataDir: string, entity: Entity): Promise<string[]> {
  const names: string[] = [];
  for (const [label, value] of INJECTED) {
    const query = new URLSearchParams({ project: PROJECT, name: `injected-${label}`, base_model: BASE_MODEL });
    const response = await fetch(`${url}/v1/preview/models/import?${query}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${entity.key}`, 'content-type': 'application/x-tar' },
      body: new Uint8Array(entity.adapterTar),
    });
    if (response.status !== 200)
      throw new Error(`seeding injected-${label}: ${response.status} ${await response.text()}`);
    const { id } = (await response.json()) as { id: string };
    const weights = path.join(dataDir, 'models', id, 'checkpoints', '0', 'adapter_model.safetensors');
    fs.writeFileSync(weights, withValue(fs.readFileSync(weights), value));
    names.push(`${entity.name}/${PROJECT}/injected-${label}`);
  }
  return names;
}

async function chat(url: string, key: string, model: string): Promise<Answer> {
  const api = httpApi(url, key);
  const body = {
    model,
    messages: [{ role: 'user', content: 'Count: 1 2 3' }],
    max_tokens: 8,
    temperature: 0,
    logprobs: true,
    ignore_eos: true,
  };
  // A server that died answers nothing: the run reports the crash itself.
  const response = await api('POST', '/v1/chat/completions', body).catch(() => ({ status: 0, body: null }));
  const content: { token: string; logprob: number }[] = response.body?.choices?.[0]?.logprobs?.content ?? [];
  return {
    model,
    status: response.status,
    tokens: content.map((c) => c.token),
    logprobs: content.map((c) => c.logprob),
  };
}

/** The entity's temperature-0 answers on the base model and on its own model, all at once. */
export function answersOf(url: string, entity: Entity): Promise<Answer[]> {
  return Promise.all(
    [BASE_MODEL, BASE_MODEL, entity.inferenceName, entity.inferenceName].map((model) => chat(url, entity.key, model)),
  );
}

/** How `now` differs from `before` (same order), as cross-entity changes named by when they were seen. */
export function answerChanges(before: Answer[], now: Answer[], when: string): string[] {
  return now.flatMap((answer, i) => {
    const was = before[i];
    const drift = answer.logprobs.map((lp, t) => Math.abs(lp - (was.logprobs[t] ?? Number.NaN)));
    const same =
      answer.status === was.status &&
      JSON.stringify(answer.tokens) === JSON.stringify(was.tokens) &&
      drift.every((d) => d <= LOGPROB_TOLERANCE);
    return same
      ? []
      : [
          `temperature-0 answer on ${answer.model} ${when}: ${answer.status} ${JSON.stringify(answer.tokens)} (was ${was.status} ${JSON.stringify(was.tokens)}; logprob drift ${Math.max(0, ...drift)})`,
        ];
  });
}

export interface ProbeReport {
  rounds: number;
  changes: string[];
  /** Chats on the injected models that answered 5xx (each must fail alone, cleanly). */
  serverErrors: string[];
}

/** Rounds until `done()`: the other entity's answers beside two chats on each injected model, compared with `before`. */
export async function probeWhile(
  url: string,
  owner: Entity,
  other: Entity,
  injected: string[],
  before: Answer[],
  done: () => boolean,
): Promise<ProbeReport> {
  const report: ProbeReport = { rounds: 0, changes: [], serverErrors: [] };
  while (!done()) {
    const [answers, poisoned] = await Promise.all([
      answersOf(url, other),
      Promise.all([...injected, ...injected].map((model) => chat(url, owner.key, model))),
    ]);
    report.rounds += 1;
    report.changes.push(...answerChanges(before, answers, `during round ${report.rounds}`));
    report.serverErrors.push(
      ...poisoned.filter((answer) => answer.status >= 500).map((answer) => `${answer.model}: ${answer.status}`),
    );
    await new Promise((resolve) => setTimeout(resolve, ROUND_PAUSE_MS));
  }
  return report;
}
