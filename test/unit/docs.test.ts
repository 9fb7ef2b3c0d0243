/**
 * The docs name files that exist: every repository path in docs/*.md and the READMEs (src/…, engine/…, test/…,
 * scripts/…) is there, so a moved or renamed file cannot leave its documentation pointing at nothing.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { repoRoot } from '../../src/repo-root.ts';

const DOCS = [
  ...fs
    .readdirSync(path.join(repoRoot, 'docs'))
    .filter((name) => name.endsWith('.md'))
    .map((name) => `docs/${name}`),
  'README.md',
  'models/README.md',
];
/** A path into one of the repository's top folders, not preceded by anything that makes it part of a longer path or URL. */
const REPO_PATH = /(?<![\w./-])((?:src|engine|test|scripts|web|docs|models|bench|examples)\/[\w./-]*[\w/])/g;
/** Made by the build or the install, never checked in. */
const BUILT = ['web/dist/'];

test('every repository path the docs name exists', () => {
  const missing: string[] = [];
  for (const doc of DOCS) {
    const text = fs.readFileSync(path.join(repoRoot, doc), 'utf8');
    for (const [, named] of text.matchAll(REPO_PATH)) {
      if (BUILT.some((built) => named.startsWith(built))) continue;
      const found = [repoRoot, path.join(repoRoot, path.dirname(doc))].some((from) =>
        fs.existsSync(path.join(from, named)),
      );
      if (!found) missing.push(`${doc}: ${named}`);
    }
  }
  assert.deepEqual([...new Set(missing)], []);
});

test("engine/__init__.py's file list names every engine module", () => {
  const engine = path.join(repoRoot, 'engine');
  const listing = fs.readFileSync(path.join(engine, '__init__.py'), 'utf8');
  const modules = fs.readdirSync(engine).filter((name) => name.endsWith('.py') && name !== '__init__.py');
  assert.deepEqual(
    modules.filter((name) => !listing.includes(name)),
    [],
  );
});
