/** Finds a Python that can run the engine, i.e. one that can `import torch`. */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { repoRoot } from '../repo-root.ts';

/**
 * The project's own venv (scripts/install.sh) first; then Debian's python3, which carries the system torch where
 * pip could not install one (a pyenv python3 found first on PATH often does not, so the absolute path comes first).
 */
const PYTHON_CANDIDATES = [path.join(repoRoot, '.venv', 'bin', 'python'), '/usr/bin/python3', 'python3'] as const;

const IMPORT_TIMEOUT_MS = 60_000;

function importsTorch(python: string): Promise<boolean> {
  return new Promise((resolve) => {
    execFile(python, ['-c', 'import torch'], { timeout: IMPORT_TIMEOUT_MS }, (error) => resolve(!error));
  });
}

let found: Promise<string> | undefined;

/** The first candidate that imports torch; looked up once per process. */
export function findEnginePython(): Promise<string> {
  found ??= (async () => {
    for (const candidate of PYTHON_CANDIDATES) if (await importsTorch(candidate)) return candidate;
    found = undefined; // torch may be installed later; look again next time
    throw new Error(`no Python that can import torch among ${PYTHON_CANDIDATES.join(', ')}; set ENGINE_PYTHON`);
  })();
  return found;
}
