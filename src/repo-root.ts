/** The checkout's root folder (the one above src/), from which models/, engine/ and web/ are found. */
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
