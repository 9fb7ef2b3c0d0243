/** The base models this server can load: configured ids mapped to HF-format folders on disk. */
import fs from 'node:fs';
import path from 'node:path';
import type { BaseModelSpec } from '../config.ts';

export class BaseModelRegistry {
  constructor(
    private readonly models: BaseModelSpec[],
    readonly defaultId: string,
  ) {}

  /** The ids whose folders hold a loadable model right now. */
  loadableIds(): string[] {
    return this.models.filter((model) => isModelFolder(model.path)).map((model) => model.id);
  }

  find(id: string): BaseModelSpec | undefined {
    const model = this.models.find((candidate) => candidate.id === id);
    return model && isModelFolder(model.path) ? model : undefined;
  }
}

function isModelFolder(folder: string): boolean {
  return fs.existsSync(path.join(folder, 'config.json'));
}
