/**
 * Multi-turn agent loops through the real chat API, our responses sent back verbatim, recorded as ART
 * trajectories; and the step-0 gap between the sampler's logprobs and the trainer's for the rows the RL
 * runner builds from them.
 */
import OpenAI from 'openai';
import { type LegacyTrajectory as Trajectory, withTrajectoryDefaults } from '../../src/api/models.ts';
import { parseRlConfig } from '../../src/training/rl/config.ts';
import { trajectorySequences } from '../../src/training/rl/runner.ts';
import type { E2eServer } from './server.ts';

/** How the client asks for logprobs: not at all (our token_id default), OpenAI SDK `logprobs: true`, or token ids explicitly. */
export type LogprobsMode = 'omitted' | 'true' | 'token_id';

export const WEATHER_TOOL = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

/** No arguments at all, so a forced call is short even on random weights. */
export const TIME_TOOL = {
  type: 'function',
  function: {
    name: 'get_time',
    description: 'The local time',
    parameters: { type: 'object', properties: {}, additionalProperties: false },
  },
};

export interface LoopOptions {
  model: string;
  mode: LogprobsMode;
  tools: boolean;
  seed: number;
  turns?: number;
  maxTokens?: number;
  kwargs?: Record<string, unknown>;
}

/**
 * A loop of `turns` sampled choices: with tools, the first turn is a forced call (content null, tool_calls,
 * as our server answers it) answered by a tool result; every later turn follows a user message. Requests
 * go through the `openai` npm client.
 */
export async function agentLoop(e2e: E2eServer, options: LoopOptions): Promise<Trajectory> {
  const client = new OpenAI({ baseURL: `${e2e.url}/v1`, apiKey: e2e.key });
  const items: Record<string, unknown>[] = [
    { role: 'system', content: 'You are a terse assistant.' },
    { role: 'user', content: 'What is the weather in Paris?' },
  ];
  const logprobs =
    options.mode === 'omitted'
      ? {}
      : options.mode === 'true'
        ? { logprobs: true }
        : { logprobs: true, return_tokens_as_token_ids: true };
  for (let turn = 0; turn < (options.turns ?? 3); turn += 1) {
    const messages = items.map((item) => (item.message ? item.message : item));
    const forced = options.tools && turn === 0;
    const body = {
      model: options.model,
      messages,
      max_tokens: forced ? 48 : (options.maxTokens ?? 8),
      ...(forced ? { temperature: 0 } : {}),
      seed: options.seed + turn,
      ...(options.tools
        ? {
            tools: [WEATHER_TOOL, TIME_TOOL],
            tool_choice: forced ? { type: 'function', function: { name: 'get_time' } } : 'none',
          }
        : {}),
      ...(options.kwargs ? { chat_template_kwargs: options.kwargs } : {}),
      ...logprobs,
    };
    const completion = await client.chat.completions.create(
      body as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming,
    );
    const choice = JSON.parse(JSON.stringify(completion.choices[0])) as Record<string, unknown>;
    items.push(choice);
    const calls = (choice.message as { tool_calls?: { id: string }[] }).tool_calls ?? [];
    if (calls.length > 0)
      items.push(...calls.map((call) => ({ role: 'tool', tool_call_id: call.id, content: '{"temperature": 18}' })));
    else items.push({ role: 'user', content: `And turn ${turn + 2}?` });
  }
  return {
    messages_and_choices: items.slice(0, -1) as Trajectory['messages_and_choices'],
    tools: options.tools ? [WEATHER_TOOL, TIME_TOOL] : null,
    reward: 0,
    ...(options.kwargs ? { chat_template_kwargs: options.kwargs } : {}),
  };
}

/** How many tool calls the loop's choices made. */
export function toolCallsIn(trajectory: Trajectory): number {
  return trajectory.messages_and_choices.reduce(
    (sum, item) => sum + ((item.message as { tool_calls?: unknown[] } | undefined)?.tool_calls ?? []).length,
    0,
  );
}

export interface Gap {
  /** Largest |trainer − sampler| logprob over the trained tokens. */
  worst: number;
  compared: number;
  /** Trained tokens without a sampler logprob. */
  missing: number;
  sequences: number;
}

/** The RL runner's rows of these trajectories, scored by the engine's forward pass on the model's current weights (step 0: the base). */
export async function samplerTrainerGap(
  e2e: E2eServer,
  baseId: string,
  trajectories: Trajectory[],
  adapter: { adapter: string | null; adapter_path?: string } = { adapter: null },
): Promise<Gap> {
  const services = e2e.server.services;
  const base = await services.runtime.loadForTraining(baseId);
  const { config } = parseRlConfig({}, () => 1e-5);
  const gap: Gap = { worst: 0, compared: 0, missing: 0, sequences: 0 };
  for (const trajectory of trajectories) {
    for (const sequence of trajectorySequences(base, withTrajectoryDefaults(trajectory), config, 'test', {
      entity: 'local',
      project: 'test',
      name: 'test',
    })) {
      gap.sequences += 1;
      const forward = await services.runtime
        .trainer()
        .request('forward', { base: base.id, ...adapter, rows: [{ tokens: sequence.tokens }] });
      sequence.mask.forEach((trained, t) => {
        if (!trained) return;
        const sampled = sequence.logprobs[t];
        if (sampled === null) {
          gap.missing += 1;
          return;
        }
        gap.worst = Math.max(gap.worst, Math.abs(forward.logprobs[0][t]! - sampled));
        gap.compared += 1;
      });
    }
  }
  return gap;
}
