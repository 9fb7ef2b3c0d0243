/**
 * The docs name files that exist: every repository path in docs/*.md and the READMEs (src/…, engine/…, test/…,
 * scripts/…) is there, and so is every file they name in backticks by its bare name (`runner.ts`) or a tail of its
 * path (`rl/runner.ts`), so a moved or renamed file cannot leave its documentation pointing at nothing. A clone has
 * nothing beside it, so a name outside the repository (`../shared/…`) is missing too.
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

/** Files of other projects that the docs cite by name, each with its project: the repository has none of them. */
const ELSEWHERE: Record<string, string> = {
  'art/loss.py': 'OpenPipe ART',
  'art/unsloth/train.py': 'OpenPipe ART',
  'art/local/backend.py': 'OpenPipe ART',
  'art/serverless/backend.py': 'OpenPipe ART',
  'recipes/sl_basic.py': 'tinker-cookbook',
  'recipes/rl_basic.py': 'tinker-cookbook',
  'wandb/sdk/lib/wbauth/validation.py': 'the wandb SDK',
};
/** A file name in backticks: a bare name or a path, of a TypeScript, Python or Markdown file. */
const NAMED_FILE = /`([\w./-]+\.(?:ts|py|md))`/g;

/** Every file under the repository but installed packages, virtual environments and caches. */
function repositoryFiles(dir = repoRoot): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    if (entry.name.startsWith('.') || ['node_modules', '__pycache__'].includes(entry.name)) return [];
    const full = path.join(dir, entry.name);
    return entry.isDirectory() ? repositoryFiles(full) : [path.relative(repoRoot, full)];
  });
}

test('every file the docs name in backticks, bare or by a tail of its path, is in the repository', () => {
  const files = repositoryFiles();
  const missing: string[] = [];
  for (const doc of DOCS) {
    const text = fs.readFileSync(path.join(repoRoot, doc), 'utf8');
    for (const [, named] of text.matchAll(NAMED_FILE)) {
      if (Object.hasOwn(ELSEWHERE, named)) continue;
      if (!files.some((file) => file === named || file.endsWith(`/${named}`))) missing.push(`${doc}: ${named}`);
    }
  }
  assert.deepEqual([...new Set(missing)], []);
});

test("every `../` path of a doc leads, from the doc's folder, to something in the repository", () => {
  const outside: string[] = [];
  for (const doc of DOCS) {
    const text = fs.readFileSync(path.join(repoRoot, doc), 'utf8');
    for (const [, named] of text.matchAll(/(?:`|\]\()(\.\.\/[^`)\s]*)/g)) {
      const target = path.resolve(repoRoot, path.dirname(doc), named);
      if (path.relative(repoRoot, target).startsWith('..') || !fs.existsSync(target)) outside.push(`${doc}: ${named}`);
    }
  }
  assert.deepEqual(outside, []);
});

test("architecture.md's op table has the ops of engine/protocol.json, the protocol's one home, roles and all", () => {
  const schema = JSON.parse(fs.readFileSync(path.join(repoRoot, 'engine/protocol.json'), 'utf8')) as {
    ops: Record<string, { role: string }>;
  };
  const documented = fs
    .readFileSync(path.join(repoRoot, 'docs/architecture.md'), 'utf8')
    .matchAll(/^\| `(\w+)` \| (sampler|trainer|both) \|/gm);
  assert.deepEqual(
    new Map([...documented].map(([, op, role]) => [op, role])),
    new Map(Object.entries(schema.ops).map(([op, { role }]) => [op, role])),
  );
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
