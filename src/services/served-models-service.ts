/**
 * The names chat completions serve to a key, as OpenAI model objects: every loadable base model, and for each model
 * of the key's entities its latest-step name `entity/project/name` and one `…:stepN` per checkpoint.
 */
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
  ) {}

  async list(principal: Principal): Promise<ModelCard[]> {
    const cards = this.baseModels.loadableIds().map((id) => this.baseCard(id));
    const rows = await this.models.servableCheckpoints(principal.entities.map((entity) => entity.id));
    let previous = '';
    for (const row of rows) {
      const name = `${row.entity_name}/${row.project}/${row.name}`;
      if (name !== previous) cards.push({ id: name, object: 'model', created: unixSeconds(row.created_at), owned_by: row.entity_name, root: row.base_model, parent: row.base_model });
      previous = name;
      cards.push({ id: `${name}:step${Number(row.step)}`, object: 'model', created: unixSeconds(row.checkpoint_created_at), owned_by: row.entity_name, root: row.base_model, parent: name });
    }
    return cards;
  }

  /** One name exactly as chat completions would resolve it (404 with `param: "model"` otherwise). */
  async retrieve(principal: Principal, name: string): Promise<ModelCard> {
    const resolved = await this.resolver.resolve(principal, name);
    if (!resolved.checkpoint) return this.baseCard(resolved.baseId);
    const owner = name.replace(/^wandb-artifact:\/\/\//, '').split('/')[0];
    const parent = /:step\d+$/.test(name) ? name.replace(/:step\d+$/, '') : resolved.baseId;
    return { id: name, object: 'model', created: unixSeconds(resolved.checkpoint.createdAt), owned_by: owner, root: resolved.baseId, parent };
  }

  private baseCard(id: string): ModelCard {
    return { id, object: 'model', created: unixSeconds(this.startedAt), owned_by: OWNER_OF_BASE_MODELS, root: id, parent: null };
  }
}
