/**
 * What the dashboard reads: model summaries (latest step, last rewards, last job), the run's metric history,
 * trajectories by split and step, and job lists. Read-only; every model goes through `ModelService.getOwned`
 * or the principal's entity ids, so another entity's data is exactly as absent as missing data.
 */
import fs from 'node:fs/promises';
import type { ModelSummaryRow } from '../api/dashboard.ts';
import {
  type JobConfig,
  type JobListItem,
  type LatestRewards,
  type MetricRow,
  type ModelSummary,
  type Overview,
  type RewardPoint,
  type TrajectoryConversation,
  type TrajectoryDetail,
  type TrajectorySteps,
  type TrajectorySummary,
  toJobListItem,
  toModelSummary,
} from '../api/dashboard.ts';
import type { Page } from '../api/lists.ts';
import type { TrajectoryExchanges } from '../api/models.ts';
import type { JobStatus } from '../api/training-vocabulary.ts';
import { mentionsReasoning, splitReasoning } from '../conversation/reasoning.ts';
import { notFound, validationError } from '../errors.ts';
import type { DashboardRepository, RunMetricRow, TrajectoryRow } from '../store/dashboard-repository.ts';
import type { TrainedTokenRepository } from '../store/trained-token-repository.ts';
import { capturedConversations, EXCHANGE_KINDS, hasExchanges } from '../trajectories/exchanges.ts';
import { isChoice } from '../trajectories/items.ts';
import type { Principal } from './auth-service.ts';
import type { BaseModelRegistry } from './base-models.ts';
import type { ModelService } from './model-service.ts';

/** How many of a run's newest metric rows are read to find each split's latest reward. */
const REWARD_LOOKBACK_ROWS = 32;
const PREVIEW_CHARS = 160;

const entityIdsOf = (principal: Principal) => principal.entities.map((entity) => entity.id);

/**
 * The split a run-metrics row belongs to, and the key prefix of its metrics: `log:<split>` rows (`/log`) and
 * `wandb:<split>` rows (a W&B run's history, wandb/history.ts) name their keys `<split>/…`; `train` rows are bare.
 */
export function splitOfSource(source: string): { split: string; prefix: string } {
  const logged = /^(?:log|wandb):(.+)$/.exec(source);
  if (logged) return { split: logged[1], prefix: `${logged[1]}/` };
  return { split: source, prefix: '' };
}

/** The newest reward per split among rows given newest first. */
export function latestRewards(rows: RunMetricRow[]): LatestRewards {
  const bySplit: Record<string, RewardPoint> = {};
  let last: LatestRewards['last'] = null;
  for (const row of rows) {
    const { split, prefix } = splitOfSource(row.source);
    if (split in bySplit) continue;
    const value = row.metrics[`${prefix}reward`];
    if (typeof value !== 'number' || !Number.isFinite(value)) continue;
    const std = row.metrics[`${prefix}reward_std_dev`];
    bySplit[split] = { value, std_dev: typeof std === 'number' && Number.isFinite(std) ? std : null, step: row.step };
    last ??= { ...bySplit[split], split };
  }
  return { last, bySplit };
}

function textOf(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part) =>
        part && typeof part === 'object' && typeof (part as { text?: unknown }).text === 'string'
          ? (part as { text: string }).text
          : '',
      )
      .join('');
  }
  return '';
}

function preview(text: string): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > PREVIEW_CHARS ? `${flat.slice(0, PREVIEW_CHARS - 1)}…` : flat;
}

const asList = (value: unknown): Record<string, unknown>[] =>
  Array.isArray(value) ? value.filter((item) => item !== null && typeof item === 'object') : [];
const toolsOf = (value: unknown): unknown[] | null => (Array.isArray(value) ? value : null);

/** A stored trajectory's conversations, in the legacy form's shape whichever form it was sent in. */
export function conversationOf(data: Record<string, unknown>): TrajectoryConversation {
  const exchanges = data.exchanges as TrajectoryExchanges | undefined;
  if (exchanges && typeof exchanges === 'object' && hasExchanges(exchanges)) {
    const [first, ...rest] = capturedConversations(exchanges);
    return {
      form: 'captured',
      kinds: EXCHANGE_KINDS.filter((kind) => (exchanges[kind]?.length ?? 0) > 0),
      messages_and_choices: first?.messages_and_choices ?? [],
      tools: first?.tools ?? null,
      additional_histories: rest.map(({ messages_and_choices, tools }) => ({ messages_and_choices, tools })),
    };
  }
  return {
    form: 'legacy',
    kinds: [],
    messages_and_choices: asList(data.messages_and_choices),
    tools: toolsOf(data.tools),
    additional_histories: asList(data.additional_histories).map((history) => ({
      messages_and_choices: asList(history.messages_and_choices),
      tools: toolsOf(history.tools),
    })),
  };
}

/** Chat messages of a trajectory's (first) conversation, with each OpenAI Choice replaced by its assistant message. */
function messagesOf(items: Record<string, unknown>[]): Record<string, unknown>[] {
  return items.map((item) =>
    isChoice(item) ? { role: 'assistant', ...(item.message as Record<string, unknown>) } : item,
  );
}

/** What the group view compares rollouts by: length in characters and tokens, and how sampling stopped. */
function samplingOf(items: Record<string, unknown>[], messages: Record<string, unknown>[]) {
  const choices = items.filter(
    (item) => typeof item === 'object' && item !== null && isChoice(item as Record<string, unknown>),
  ) as { finish_reason?: unknown; logprobs?: { content?: unknown } | null }[];
  const counted = choices.filter((choice) => Array.isArray(choice.logprobs?.content));
  const lastReason = choices.at(-1)?.finish_reason;
  return {
    response_chars: messages
      .filter((message) => message.role === 'assistant')
      .reduce((sum, message) => sum + textOf(message.content).length, 0),
    completion_tokens:
      counted.length === 0
        ? null
        : counted.reduce((sum, choice) => sum + (choice.logprobs!.content as unknown[]).length, 0),
    finish_reason: typeof lastReason === 'string' ? lastReason : null,
  };
}

/** What the list and the detail both show of a stored trajectory, in the API's names. */
function trajectoryHeader(row: TrajectoryRow) {
  return {
    id: row.id,
    split: row.split,
    step: row.step,
    group_index: row.groupIndex,
    trajectory_index: row.trajectoryIndex,
    reward: row.reward,
    created_at: row.createdAt,
  };
}

export function summarizeTrajectory(row: TrajectoryRow): TrajectorySummary {
  const items = conversationOf(row.data).messages_and_choices;
  const messages = messagesOf(items);
  const firstUser = messages.find((message) => message.role === 'user');
  const lastAssistant = [...messages].reverse().find((message) => message.role === 'assistant');
  const numToolCalls = messages.reduce(
    (count, message) => count + (Array.isArray(message.tool_calls) ? message.tool_calls.length : 0),
    0,
  );
  const hasReasoning = messages.some((message) => {
    const reasoning = message.reasoning ?? message.reasoning_content;
    return (typeof reasoning === 'string' && reasoning.length > 0) || mentionsReasoning(textOf(message.content));
  });
  const metrics = Object.fromEntries(
    Object.entries((row.data.metrics as Record<string, unknown> | null | undefined) ?? {}).filter(
      (entry): entry is [string, number] => typeof entry[1] === 'number' && Number.isFinite(entry[1]),
    ),
  );
  // The answer, without the reasoning a model wrote inline.
  let response = lastAssistant ? splitReasoning(textOf(lastAssistant.content)).answer : '';
  if (!response && lastAssistant && Array.isArray(lastAssistant.tool_calls) && lastAssistant.tool_calls.length > 0) {
    const call = lastAssistant.tool_calls[0] as { function?: { name?: unknown } };
    // The list marks every preview as a reply with its own arrow.
    response = `${String(call.function?.name ?? 'tool call')}(…)`;
  }
  return {
    ...trajectoryHeader(row),
    num_messages: messages.length,
    num_tool_calls: numToolCalls,
    has_reasoning: hasReasoning,
    prompt_preview: preview(firstUser ? textOf(firstUser.content) : ''),
    response_preview: preview(response),
    ...samplingOf(items, messages),
    metrics,
  };
}

export class DashboardService {
  constructor(
    private readonly repository: DashboardRepository,
    private readonly trainedTokens: Pick<TrainedTokenRepository, 'find'>,
    private readonly models: Pick<ModelService, 'getOwned'>,
    private readonly baseModels: Pick<BaseModelRegistry, 'loadableIds' | 'defaultId'>,
    /** A stored job request as its runner reads it (training/job-service.ts `payloadView`); null when it reads as none. */
    private readonly payloadView: (
      type: 'rl' | 'sft',
      raw: unknown,
    ) => Pick<JobConfig, 'config' | 'num_trajectory_groups' | 'num_trajectories'> | null,
  ) {}

  overview(principal: Principal): Overview {
    return {
      entity: principal.entityName,
      entities: principal.entities.map((entity) => entity.name),
      base_models: this.baseModels.loadableIds(),
      default_base_model: this.baseModels.defaultId,
    };
  }

  private async toSummaryView(row: ModelSummaryRow): Promise<ModelSummary> {
    return toModelSummary(row, latestRewards(await this.repository.latestRunMetrics(row.run_id, REWARD_LOOKBACK_ROWS)));
  }

  async listModels(
    principal: Principal,
    query: { project?: string; after?: string; limit: number },
  ): Promise<Page<ModelSummary>> {
    const entityIds = entityIdsOf(principal);
    let after: { entityName: string; project: string; name: string } | undefined;
    if (query.after !== undefined) {
      const cursor = await this.repository.modelSummary(query.after, entityIds);
      if (!cursor)
        throw validationError([
          { loc: ['query', 'after'], msg: `No model with id ${JSON.stringify(query.after)}`, type: 'value_error' },
        ]);
      after = { entityName: cursor.entity_name, project: cursor.project, name: cursor.name };
    }
    const page = await this.repository.pageModels(entityIds, { project: query.project, after, limit: query.limit });
    return { items: await Promise.all(page.items.map((row) => this.toSummaryView(row))), hasMore: page.hasMore };
  }

  async getModel(principal: Principal, modelId: string): Promise<ModelSummary> {
    const model = await this.models.getOwned(principal, modelId);
    const row = await this.repository.modelSummary(model.id, entityIdsOf(principal));
    if (!row) throw new Error('an owned model has no summary');
    return this.toSummaryView(row);
  }

  /** The run's metric history: one row per training job (`train`) or log call (`log:<split>`), in step order. */
  async metrics(
    principal: Principal,
    modelId: string,
    query: { after?: string; limit: number },
  ): Promise<Page<MetricRow>> {
    const model = await this.models.getOwned(principal, modelId);
    let after: { step: number; id: number } | undefined;
    if (query.after !== undefined) {
      const cursor = /^\d+$/.test(query.after)
        ? await this.repository.findRunMetric(model.run_id, Number(query.after))
        : undefined;
      if (!cursor)
        throw validationError([
          {
            loc: ['query', 'after'],
            msg: `No metrics row with id ${JSON.stringify(query.after)} in this run`,
            type: 'value_error',
          },
        ]);
      after = { step: cursor.step, id: cursor.id };
    }
    const page = await this.repository.pageRunMetrics(model.run_id, { after, limit: query.limit });
    return {
      items: page.items.map((row) => ({
        id: String(row.id),
        step: row.step,
        source: row.source,
        split: splitOfSource(row.source).split,
        metrics: row.metrics,
        created_at: row.createdAt,
      })),
      hasMore: page.hasMore,
    };
  }

  async trajectorySteps(principal: Principal, modelId: string): Promise<TrajectorySteps> {
    const model = await this.models.getOwned(principal, modelId);
    const splits = new Map<string, TrajectorySteps['splits'][number]>();
    for (const row of await this.repository.trajectorySteps(model.id)) {
      const entry = splits.get(row.split) ?? { split: row.split, count: 0, steps: [] };
      entry.count += row.count;
      entry.steps.push({ step: row.step, count: row.count });
      splits.set(row.split, entry);
    }
    return { splits: [...splits.values()] };
  }

  async trajectories(
    principal: Principal,
    modelId: string,
    query: { split: string; step?: number; after?: string; limit: number },
  ): Promise<Page<TrajectorySummary>> {
    const model = await this.models.getOwned(principal, modelId);
    let after: { step: number; id: string } | undefined;
    if (query.after !== undefined) {
      const cursor = await this.repository.findTrajectory(model.id, query.after);
      if (!cursor || cursor.split !== query.split || (query.step !== undefined && cursor.step !== query.step)) {
        const where = `split ${JSON.stringify(query.split)}${query.step !== undefined ? ` at step ${query.step}` : ''}`;
        throw validationError([
          {
            loc: ['query', 'after'],
            msg: `No trajectory with id ${JSON.stringify(query.after)} in ${where}`,
            type: 'value_error',
          },
        ]);
      }
      after = { step: cursor.step, id: cursor.id };
    }
    const page = await this.repository.pageTrajectories(model.id, query.split, {
      step: query.step,
      after,
      limit: query.limit,
    });
    return { items: page.items.map(summarizeTrajectory), hasMore: page.hasMore };
  }

  async trajectory(principal: Principal, modelId: string, trajectoryId: string): Promise<TrajectoryDetail> {
    const model = await this.models.getOwned(principal, modelId);
    const row = await this.repository.findTrajectory(model.id, trajectoryId);
    if (!row) throw notFound('Trajectory');
    return {
      ...trajectoryHeader(row),
      data: row.data,
      conversation: conversationOf(row.data),
      trained_tokens:
        row.split === 'train'
          ? ((await this.trainedTokens.find(model.id, row.step, row.groupIndex, row.trajectoryIndex)) ?? null)
          : null,
    };
  }

  /** The configuration a job ran with, read from the request it was queued with. */
  async jobConfig(principal: Principal, jobId: string): Promise<JobConfig> {
    const job = await this.repository.findJob(jobId, entityIdsOf(principal));
    if (!job) throw notFound('Training job');
    const view: JobConfig = {
      job_id: job.id,
      type: job.type,
      config: null,
      num_trajectory_groups: null,
      num_trajectories: null,
    };
    let raw: unknown;
    try {
      raw = JSON.parse(await fs.readFile(job.payload_path, 'utf8'));
    } catch {
      return view;
    }
    return { ...view, ...this.payloadView(job.type === 'sft' ? 'sft' : 'rl', raw) };
  }

  async jobs(
    principal: Principal,
    query: { modelId?: string; statuses?: JobStatus[]; after?: string; limit: number },
  ): Promise<Page<JobListItem>> {
    if (query.modelId !== undefined) await this.models.getOwned(principal, query.modelId);
    const page = await this.repository.pageJobs(entityIdsOf(principal), {
      modelId: query.modelId,
      statuses: query.statuses,
      afterId: query.after,
      limit: query.limit,
    });
    return { items: page.items.map(toJobListItem), hasMore: page.hasMore };
  }
}
