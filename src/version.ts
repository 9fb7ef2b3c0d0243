/** The service's version, read once from package.json so the API description and the CLI never disagree with it. */
import fs from 'node:fs';
import path from 'node:path';
import { repoRoot } from './repo-root.ts';

export const PACKAGE_VERSION: string = (
  JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8')) as { version: string }
).version;
