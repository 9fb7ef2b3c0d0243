/**
 * A model created from a PEFT adapter trained elsewhere, uploaded as a tar of `adapter_config.json` and
 * `adapter_model.safetensors`. The upload is staged to a file, listed and checked against the base model
 * (adapter-validation.ts), then loaded by the trainer engine against the base's own projections, before the model
 * exists; any problem is a 422 naming it, and nothing is kept.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import fs from 'node:fs/promises';
import path from 'node:path';
import { type Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ModelCreateBody, ModelResponse } from '../api/models.ts';
import { listTar, type TarMember } from '../artifacts/tar.ts';
import { EngineError } from '../engine/errors.ts';
import { AppError, type FieldProblem, validationError } from '../errors.ts';
import { newId } from '../ids.ts';
import { checkLoraConfig, checkLoraTensors, checkLoraValues } from './adapter-validation.ts';
import type { Principal } from './auth-service.ts';
import type { BaseModelRuntime } from './base-model-runtime.ts';
import type { BaseModelRegistry } from './base-models.ts';
import { ADAPTER_CONFIG, ADAPTER_WEIGHTS } from './checkpoint-export.ts';
import type { ModelService } from './model-service.ts';

const MAX_CONFIG_BYTES = 1 << 20;
const MAX_HEADER_BYTES = 100 << 20;

const refuse = (msg: string, loc: string[] = []): AppError =>
  validationError([{ loc: ['body', ...loc], msg, type: 'value_error' }]);

export class AdapterImporter {
  constructor(
    private readonly models: ModelService,
    private readonly baseModels: BaseModelRegistry,
    private readonly runtime: BaseModelRuntime,
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
    try {
      await this.stage(upload, staged);
      const targets = Object.keys((await this.runtime.loadForTraining(base.id)).loraTargets ?? {});
      const { config, weights } = await this.check(staged, targets);
      const write = async (folder: string) => {
        await fs.mkdir(folder, { recursive: true });
        await fs.writeFile(
          path.join(folder, ADAPTER_CONFIG),
          `${JSON.stringify({ ...config, base_model_name_or_path: base.id }, null, 2)}\n`,
        );
        await pipeline(
          createReadStream(staged, { start: weights.offset, end: weights.offset + weights.size - 1 }),
          createWriteStream(path.join(folder, ADAPTER_WEIGHTS)),
        );
      };
      await this.loadsInEngine(base.id, `${staged}.d`, write);
      return await this.models.create(principal, input, write);
    } finally {
      await fs.rm(staged, { force: true });
      await fs.rm(`${staged}.d`, { recursive: true, force: true });
    }
  }

  /** The trainer engine loads the adapter against the base's own projections (every tensor a module the base has, with
   * its sizes), then drops it: what it refuses is a 422 with its words. */
  private async loadsInEngine(base: string, folder: string, write: (folder: string) => Promise<void>): Promise<void> {
    await write(folder);
    const engine = this.runtime.trainer();
    const adapter = `import-check-${newId()}`;
    try {
      await engine.request('ensure_adapter', { adapter, base, path: folder });
    } catch (error) {
      if (error instanceof EngineError && (error.code === 'bad_request' || error.code === 'non_finite'))
        throw refuse(`the base model cannot load this adapter: ${error.message}`, [ADAPTER_WEIGHTS]);
      throw error;
    }
    await engine.request('drop_adapter', { adapter });
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

  /** The archive's config and weights member, or a 422 listing every problem found. */
  private async check(
    file: string,
    targets: string[],
  ): Promise<{ config: Record<string, unknown>; weights: TarMember }> {
    const handle = await fs.open(file);
    try {
      const members = await listTar(handle).catch((error: Error) => {
        throw refuse(`the upload is not a readable tar archive: ${error.message}`);
      });
      const pick = (name: string) => {
        const found = members.filter(
          (m) => (m.type === '0' || m.type === '\0') && path.posix.basename(m.name) === name,
        );
        if (found.length !== 1)
          throw refuse(found.length ? `the archive holds ${name} more than once` : `the archive has no ${name}`, [
            name,
          ]);
        return found[0];
      };
      const [configMember, weights] = [pick(ADAPTER_CONFIG), pick(ADAPTER_WEIGHTS)];
      const config = await readJson(handle, configMember.offset, configMember.size, MAX_CONFIG_BYTES, [ADAPTER_CONFIG]);
      const problems: FieldProblem[] = checkLoraConfig(config, targets);
      if (problems.length) throw validationError(problems);
      const header = await safetensorsHeader(handle, weights);
      problems.push(
        ...checkLoraTensors(header.json, config.r as number, config.target_modules as string[], header.dataBytes),
      );
      if (problems.length) throw validationError(problems);
      problems.push(...(await checkLoraValues(handle, header.dataStart, header.json)));
      if (problems.length) throw validationError(problems);
      return { config, weights };
    } finally {
      await handle.close();
    }
  }
}

async function readJson(
  handle: fs.FileHandle,
  offset: number,
  size: number,
  max: number,
  loc: string[],
): Promise<Record<string, unknown>> {
  if (size > max) throw refuse(`larger than ${max} bytes`, loc);
  const buffer = Buffer.alloc(size);
  await handle.read(buffer, 0, size, offset);
  try {
    const value: unknown = JSON.parse(buffer.toString('utf8'));
    if (value && typeof value === 'object' && !Array.isArray(value)) return value as Record<string, unknown>;
  } catch {
    // reported below
  }
  throw refuse('not a JSON object', loc);
}

/**
 * The values of an adapter folder's weights (a checkpoint about to become another model's, as a fork copies it): a 422
 * naming each tensor with a value out of bounds and its first bad index, as an import would answer.
 */
export async function checkAdapterFolderValues(folder: string): Promise<void> {
  const handle = await fs.open(path.join(folder, ADAPTER_WEIGHTS));
  try {
    const header = await safetensorsHeader(handle, { offset: 0, size: (await handle.stat()).size });
    const problems = await checkLoraValues(handle, header.dataStart, header.json);
    if (problems.length) throw validationError(problems);
  } finally {
    await handle.close();
  }
}

/** The JSON header of a safetensors member (8-byte little-endian length, then JSON), where its data starts and how many data bytes follow. */
async function safetensorsHeader(
  handle: fs.FileHandle,
  member: Pick<TarMember, 'offset' | 'size'>,
): Promise<{ json: Record<string, unknown>; dataStart: number; dataBytes: number }> {
  const prefix = Buffer.alloc(8);
  if (member.size < 8) throw refuse('too short to be safetensors', [ADAPTER_WEIGHTS]);
  await handle.read(prefix, 0, 8, member.offset);
  const length = Number(prefix.readBigUInt64LE(0));
  if (length > member.size - 8)
    throw refuse(`header length ${length} runs past the file (${member.size} bytes): not safetensors`, [
      ADAPTER_WEIGHTS,
    ]);
  const json = await readJson(handle, member.offset + 8, length, MAX_HEADER_BYTES, [ADAPTER_WEIGHTS]);
  return { json, dataStart: member.offset + 8 + length, dataBytes: member.size - 8 - length };
}
