/**
 * A model created from a PEFT adapter trained elsewhere, uploaded as a tar of `adapter_config.json` and
 * `adapter_model.safetensors`. The upload is staged to a file and its two members unpacked beside it; the engine
 * checks that folder against the base model (its `check_adapter` op, the one home of what an adapter must be:
 * engine/peft.py) before the model exists, and any problem is a 422 naming the file and field; nothing is kept.
 * A fork's copied checkpoint goes through the same check.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { type Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ModelCreateBody, ModelResponse } from '../api/models.ts';
import { listTar, type TarMember } from '../artifacts/tar.ts';
import type { Engine } from '../engine/ops.ts';
import { AppError, type FieldProblem, validationError } from '../errors.ts';
import { newId } from '../ids.ts';
import type { Principal } from './auth-service.ts';
import type { BaseModelRegistry } from './base-models.ts';
import { ADAPTER_CONFIG, ADAPTER_WEIGHTS, publicAdapterConfig } from './checkpoint-export.ts';
import type { ModelService } from './model-service.ts';

/** Every problem of the adapter folder for the base model in `basePath`, as 422 entries (none: it loads). */
export type AdapterCheck = (folder: string, basePath: string) => Promise<FieldProblem[]>;

/** The check the engine makes (`check_adapter`, on the trainer: every topology trains on our engine). */
export function engineAdapterCheck(trainer: () => Engine): AdapterCheck {
  return async (folder, basePath) => {
    const { problems } = await trainer().request('check_adapter', { path: folder, base_path: basePath });
    return problems.map(({ loc, msg }) => ({ loc: ['body', ...loc], msg, type: 'value_error' }));
  };
}

const MAX_CONFIG_BYTES = 1 << 20;

const refuse = (msg: string, loc: string[] = []): AppError =>
  validationError([{ loc: ['body', ...loc], msg, type: 'value_error' }]);

export class AdapterImporter {
  constructor(
    private readonly models: ModelService,
    private readonly baseModels: BaseModelRegistry,
    private readonly check: AdapterCheck,
    private readonly stagingDir: string,
    private readonly maxBytes: number,
  ) {}

  async import(principal: Principal, input: ModelCreateBody, upload: Readable): Promise<ModelResponse> {
    const base = this.baseModels.find(input.base_model);
    if (!base)
      throw validationError([
        {
          loc: ['query', 'base_model'],
          msg: `Unknown base model ${JSON.stringify(input.base_model)}; this server can load: ${this.baseModels.loadableIds().join(', ')}`,
          type: 'value_error',
        },
      ]);
    await fs.mkdir(this.stagingDir, { recursive: true });
    const staged = path.join(this.stagingDir, `import-${newId()}.tar`);
    const folder = `${staged}.d`;
    try {
      await this.stage(upload, staged);
      await unpack(staged, folder);
      const problems = await this.check(folder, base.path);
      if (problems.length) throw validationError(problems);
      return await this.models.create(principal, input, async (target) => {
        await fs.mkdir(target, { recursive: true });
        const config = await publicAdapterConfig(folder, base.id);
        await fs.writeFile(path.join(target, ADAPTER_CONFIG), `${JSON.stringify(config, null, 2)}\n`);
        await fs.copyFile(path.join(folder, ADAPTER_WEIGHTS), path.join(target, ADAPTER_WEIGHTS));
      });
    } finally {
      await fs.rm(staged, { force: true });
      await fs.rm(folder, { recursive: true, force: true });
    }
  }

  /** Removes uploads a crash left staged (run at start, before any import can be under way). */
  async sweepStaging(): Promise<void> {
    await fs.rm(this.stagingDir, { recursive: true, force: true });
  }

  private async stage(upload: Readable, file: string): Promise<void> {
    let received = 0;
    const limit = this.maxBytes;
    const cap = new Transform({
      transform(chunk: Buffer, _encoding, done) {
        received += chunk.length;
        done(
          received > limit
            ? new AppError('payload_too_large', `The adapter archive is larger than ${limit} bytes`)
            : null,
          chunk,
        );
      },
    });
    await pipeline(upload, cap, createWriteStream(file));
  }
}

/** The archive's config and weights, each once, written into `folder` (anything else in it is left out). */
async function unpack(file: string, folder: string): Promise<void> {
  const handle = await fs.open(file);
  let members: TarMember[];
  try {
    members = await listTar(handle).catch((error: Error) => {
      throw refuse(`the upload is not a readable tar archive: ${error.message}`);
    });
  } finally {
    await handle.close();
  }
  const pick = (name: string) => {
    const found = members.filter((m) => (m.type === '0' || m.type === '\0') && path.posix.basename(m.name) === name);
    if (found.length !== 1)
      throw refuse(found.length ? `the archive holds ${name} more than once` : `the archive has no ${name}`, [name]);
    return found[0];
  };
  const [config, weights] = [pick(ADAPTER_CONFIG), pick(ADAPTER_WEIGHTS)];
  if (config.size > MAX_CONFIG_BYTES) throw refuse(`larger than ${MAX_CONFIG_BYTES} bytes`, [ADAPTER_CONFIG]);
  await fs.mkdir(folder, { recursive: true });
  for (const [member, name] of [
    [config, ADAPTER_CONFIG],
    [weights, ADAPTER_WEIGHTS],
  ] as const) {
    const target = path.join(folder, name);
    if (member.size === 0)
      await fs.writeFile(target, ''); // the engine names it (not JSON, not safetensors)
    else
      await pipeline(
        createReadStream(file, { start: member.offset, end: member.offset + member.size - 1 }),
        createWriteStream(target),
      );
  }
}
