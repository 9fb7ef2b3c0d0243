/**
 * The names chat completions serve to a key, as OpenAI model objects: every loadable base model, and for each model
 * of the key's entities its latest-step name `entity/project/name` and one `…:stepN` per checkpoint.
 */
import { parseServedModelName, servedModelName } from '../api/model-name.ts';
import type { ModelCard } from '../api/openai-models.ts';
import type { ModelRepository } from '../store/model-repository.ts';
import type { Principal } from './auth-service.ts';
import type { BaseModelRegistry } from './base-models.ts';
import type { ModelResolver } from './model-resolver.ts';

const OWNER_OF_BASE_MODELS = 'agent-trainer';

const unixSeconds = (iso: string) => Math.floor(Date.parse(iso) / 1000);

export class ServedModelsService {
  constructor(
    private readonly models: ModelRepository,
    private readonly baseModels: BaseModelRegistry,
    private readonly resolver: ModelResolver,
    private readonly startedAt: string,
    private readonly toolCallParser: (baseId: string) => Promise<string | null>,
    private readonly samplerEngine: (baseId: string) => ModelCard['sampler_engine'] = () => 'ours',
  ) {}

  async list(principal: Principal): Promise<ModelCard[]> {
    const parsers = new Map<string, string | null>();
    const implementations = new Map<string, ModelCard['implementation']>();
    for (const id of this.baseModels.loadableIds()) {
      parsers.set(id, await this.toolCallParser(id));
      implementations.set(id, await this.baseModels.implementation(id));
    }
    const cards = [...parsers.keys()].map((id) =>
      this.baseCard(id, parsers.get(id) ?? null, implementations.get(id) ?? null),
    );
    const rows = await this.models.servableCheckpoints(principal.entities.map((entity) => entity.id));
    let previous = '';
    for (const row of rows) {
      const name = servedModelName({ entity: row.entity_name, project: row.project, name: row.name });
      const common = {
        object: 'model' as const,
        owned_by: row.entity_name,
        root: row.base_model,
        tool_call_parser: parsers.get(row.base_model) ?? null,
        sampler_engine: this.samplerEngine(row.base_model),
        implementation: implementations.get(row.base_model) ?? null,
      };
      if (name !== previous)
        cards.push({ id: name, created: unixSeconds(row.created_at), parent: row.base_model, ...common });
      previous = name;
      cards.push({
        id: servedModelName({ entity: row.entity_name, project: row.project, name: row.name, step: row.step }),
        created: unixSeconds(row.checkpoint_created_at),
        parent: name,
        ...common,
      });
    }
    return cards;
  }

  /** One name exactly as chat completions would resolve it (404 with `param: "model"` otherwise). */
  async retrieve(principal: Principal, name: string): Promise<ModelCard> {
    const resolved = await this.resolver.resolve(principal, name);
    const parser = await this.toolCallParser(resolved.baseId);
    const implementation = await this.baseModels.implementation(resolved.baseId);
    if (!resolved.checkpoint) return this.baseCard(resolved.baseId, parser, implementation);
    // A name that resolved to a checkpoint is a served model name; `:stepN` names the model, the others its base.
    const parsed = parseServedModelName(name)!;
    const parent = typeof parsed.step === 'number' ? servedModelName({ ...parsed, step: null }) : resolved.baseId;
    const engine = this.samplerEngine(resolved.baseId);
    return {
      id: name,
      object: 'model',
      created: unixSeconds(resolved.checkpoint.createdAt),
      owned_by: parsed.entity,
      root: resolved.baseId,
      parent,
      tool_call_parser: parser,
      sampler_engine: engine,
      implementation,
    };
  }

  private baseCard(id: string, toolCallParser: string | null, implementation: ModelCard['implementation']): ModelCard {
    const engine = this.samplerEngine(id);
    return {
      id,
      object: 'model',
      created: unixSeconds(this.startedAt),
      owned_by: OWNER_OF_BASE_MODELS,
      root: id,
      parent: null,
      tool_call_parser: toolCallParser,
      sampler_engine: engine,
      implementation,
    };
  }
}
