/**
 * `kl_ref_adapter_path` → the checkpoint an RL job measures its KL penalty against. ART's trainer takes a
 * filesystem path to a LoRA adapter; on a shared server a path could read another entity's files or anything
 * else on disk, so only names of checkpoints the key may use are accepted, resolved through the database and never
 * through the filesystem: ART's inference names `wandb-artifact:///entity/project/name:stepN` (what
 * `model.get_inference_name(step)` gives) and `entity/project/name:stepN` (`:latest` or no tag: the latest
 * checkpoint at submission), the Tinker paths `tinker://<model id>/<sampler_weights|weights>/<name>`, and the
 * base model's own id (the base policy). The checkpoint must be of a model on the trained model's base. Anything
 * else, another entity's model included (exactly as unknown as a missing one), is a field problem.
 */
import { AppError, excerpt, type FieldProblem } from '../../errors.ts';
import type { Principal } from '../../services/auth-service.ts';
import type { ModelResolver } from '../../services/model-resolver.ts';

const LOC = ['body', 'experimental_config', 'kl_ref_adapter_path'];
const FORMS =
  'wandb-artifact:///entity/project/name:stepN, entity/project/name:stepN, tinker://<model id>/sampler_weights/<name> or the base model id';

/** What resolving a `tinker://` path needs (src/tinker/ implements it; training does not import that room). */
export interface TinkerPathResolver {
  resolvePath(
    principal: Principal,
    path: string,
  ): Promise<{ model: { id: string; base_model: string }; checkpoint: { step: number } }>;
}

/** A named checkpoint: the model and step the job's KL reference is; null: the base model itself. */
export type KlReference = { model_id: string; step: number } | null;

export class KlReferenceResolver {
  constructor(
    private readonly names: Pick<ModelResolver, 'resolve'>,
    private readonly tinker: TinkerPathResolver,
  ) {}

  async resolve(
    principal: Principal,
    path: string,
    baseModel: string,
  ): Promise<{ reference: KlReference } | { problem: FieldProblem }> {
    let found: { baseId: string; reference: KlReference };
    try {
      found = await this.find(principal, path);
    } catch (error) {
      if (!(error instanceof AppError) || !['not_found', 'bad_request'].includes(error.code)) throw error;
      return {
        problem: {
          loc: LOC,
          msg: `${JSON.stringify(excerpt(path))} is no checkpoint of a model this key may use; expected ${FORMS} (filesystem paths are not accepted)`,
          type: 'value_error',
        },
      };
    }
    if (found.baseId !== baseModel) {
      return {
        problem: {
          loc: LOC,
          msg: `${JSON.stringify(excerpt(path))} is a checkpoint of base model ${found.baseId}; the KL reference must share the trained model's base ${baseModel}`,
          type: 'value_error',
        },
      };
    }
    return { reference: found.reference };
  }

  private async find(principal: Principal, path: string): Promise<{ baseId: string; reference: KlReference }> {
    if (path.startsWith('tinker://')) {
      const { model, checkpoint } = await this.tinker.resolvePath(principal, path);
      return { baseId: model.base_model, reference: { model_id: model.id, step: checkpoint.step } };
    }
    const { baseId, checkpoint } = await this.names.resolve(principal, path);
    return { baseId, reference: checkpoint ? { model_id: checkpoint.modelId, step: checkpoint.step } : null };
  }
}
