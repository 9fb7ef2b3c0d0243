/**
 * The run side of the W&B SDK, as far as `wandb.init` and `run.finish` need it: who the key is (viewer), the
 * projects of its entities, run creation (upsertBucket) and the upload URLs for the run's own files. No run is
 * kept: a run exists for the SDK's session only, so resuming one (`resume="must"`) finds nothing, and its files and
 * console output are read and dropped. Its history is kept when the run is named after a model (history.ts): then it
 * is the model's run history, where training metrics live too.
 */
import { AppError, excerpt } from '../errors.ts';
import type { Principal } from '../services/auth-service.ts';
import type { UpsertBucketInput } from './schemas.ts';
import { unsupported } from './unsupported.ts';
import type { UploadTokens } from './upload-tokens.ts';

/** W&B's project when a run names none. */
export const DEFAULT_PROJECT = 'uncategorized';

export interface WandbRunView {
  entity: { id: string; name: string };
  project: string;
  name: string;
  displayName: string | null;
  description: string | null;
  notes: string | null;
  config: string | null;
  tags: string[] | null;
}

export class WandbRuns {
  constructor(private readonly tokens: UploadTokens) {}

  /** The entity a request names (the key's own when it names none), when the key may act for it. */
  entity(principal: Principal, name: string | null | undefined): { id: string; name: string } {
    const wanted = name ?? principal.entityName;
    const entity = principal.entities.find((candidate) => candidate.name === wanted);
    if (!entity)
      throw new AppError('forbidden', `This API key may not act for entity ${JSON.stringify(excerpt(wanted))}`);
    return entity;
  }

  /** upsertBucket: the run as the SDK asked for it (nothing is stored). */
  upsert(principal: Principal, input: UpsertBucketInput): WandbRunView {
    if (input.sweep != null) throw unsupported('Sweeps');
    if (!input.name) throw new AppError('bad_request', 'upsertBucket: name (the run id) is required');
    return {
      entity: this.entity(principal, input.entityName),
      project: input.modelName ?? DEFAULT_PROJECT,
      name: input.name,
      displayName: input.displayName ?? null,
      description: input.description ?? null,
      notes: input.notes ?? null,
      config: input.config ?? null,
      tags: input.tags ?? null,
    };
  }

  /** createRunFiles: an upload URL per run file (metadata, requirements, config, summary, console log), dropped on arrival. */
  fileUploads(principal: Principal, input: { entityName: string; files: string[] }): { name: string; token: string }[] {
    this.entity(principal, input.entityName);
    return input.files.map((name) => ({ name, token: this.tokens.sign({ kind: 'run_file' }) }));
  }
}
