/**
 * The code's shape, checked rather than hoped for: src/ has no import cycle (between files, between its
 * top-level folders and root files, so that e.g. services never import jobs while jobs use services, or between a
 * folder's subfolders and its own files, so that training/rl/ never imports back what imports it), and no function in
 * src/, web/src or engine/ is longer than the hard limit. The five longest functions are printed either way,
 * so the next split is easy to pick.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import ts from 'typescript';

const ROOT = path.resolve(import.meta.dirname, '..');
const SRC = path.join(ROOT, 'src');
/** Hard limit on a function's lines: a function should read top to bottom in one screen (about 60). */
const MAX_FUNCTION_LINES = 80;

function filesUnder(dir: string, extensions: string[]): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((name) => extensions.some((ext) => name.endsWith(ext)) && !name.endsWith('.d.ts'))
    .map((name) => path.join(dir, name))
    .sort();
}

function parse(file: string): ts.SourceFile {
  return ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true);
}

/** Relative module specifiers a file imports or re-exports, static, type-only and dynamic alike. */
function specifiers(source: ts.SourceFile): string[] {
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if ((ts.isImportDeclaration(node) || ts.isExportDeclaration(node)) && node.moduleSpecifier) {
      if (ts.isStringLiteral(node.moduleSpecifier)) found.push(node.moduleSpecifier.text);
    } else if (ts.isCallExpression(node) && node.expression.kind === ts.SyntaxKind.ImportKeyword) {
      const [arg] = node.arguments;
      if (arg && ts.isStringLiteralLike(arg)) found.push(arg.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found.filter((spec) => spec.startsWith('.'));
}

/** src/ file (relative to src/) → the src/ files it imports. */
function importGraph(): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  for (const file of filesUnder(SRC, ['.ts'])) {
    const targets = specifiers(parse(file))
      .map((spec) => path.relative(SRC, path.resolve(path.dirname(file), spec)))
      .filter((target) => !target.startsWith('..'));
    graph.set(path.relative(SRC, file), [...new Set(targets)]);
  }
  return graph;
}

/**
 * The graph of one folder's subfolders and own files (src/ itself by default): a file directly in the folder is a
 * node of its own, so a root module that imports a folder importing it back (config.ts ↔ services/) is a cycle
 * like any other, and so is a subfolder that imports a file of its parent that imports it back
 * (training/rl/ → training/payloads.ts → training/rl/config.ts).
 */
function folderGraph(files: Map<string, string[]>, folder = ''): Map<string, string[]> {
  const prefix = folder ? `${folder}/` : '';
  const node = (file: string) => {
    const rest = file.slice(prefix.length);
    return rest.includes('/') ? `${prefix}${rest.slice(0, rest.indexOf('/'))}/` : file;
  };
  const graph = new Map<string, Set<string>>();
  for (const [file, targets] of files) {
    if (!file.startsWith(prefix)) continue;
    const edges = graph.get(node(file)) ?? new Set<string>();
    for (const target of targets) if (target.startsWith(prefix) && node(target) !== node(file)) edges.add(node(target));
    graph.set(node(file), edges);
  }
  return new Map([...graph].map(([from, edges]) => [from, [...edges]]));
}

/** Every folder under src/ that has a subfolder, as a path relative to src/. */
function foldersWithSubfolders(files: Iterable<string>): string[] {
  const folders = new Set([...files].map((file) => path.dirname(file)).filter((dir) => dir !== '.'));
  return [...folders]
    .map((dir) => path.dirname(dir))
    .filter((dir, index, all) => dir !== '.' && all.indexOf(dir) === index);
}

/**
 * One line per strongly connected component (Tarjan): a concrete cycle through it, closed back on its start,
 * and the component's other members when it holds more than that cycle.
 */
function cycles(graph: Map<string, string[]>): string[] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const found: string[] = [];
  const connect = (node: string): void => {
    index.set(node, index.size);
    low.set(node, index.get(node)!);
    stack.push(node);
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        connect(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (stack.includes(next)) {
        low.set(node, Math.min(low.get(node)!, index.get(next)!));
      }
    }
    if (low.get(node) !== index.get(node)) return;
    const component = stack.splice(stack.indexOf(node));
    const selfLoop = (graph.get(node) ?? []).includes(node);
    if (component.length < 2 && !selfLoop) return;
    const cycle = cyclePath(graph, new Set(component), node);
    const others = component.filter((member) => !cycle.includes(member));
    found.push(cycle.join(' → ') + (others.length > 0 ? ` (with ${others.join(', ')})` : ''));
  };
  for (const node of graph.keys()) if (!index.has(node)) connect(node);
  return found;
}

/** One concrete cycle through `start` inside its component, found breadth first, for the failure message. */
function cyclePath(graph: Map<string, string[]>, component: Set<string>, start: string): string[] {
  const cameFrom = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const node = queue.shift()!;
    for (const next of graph.get(node) ?? []) {
      if (!component.has(next)) continue;
      if (next === start) {
        const route = [node];
        while (route[0] !== start) route.unshift(cameFrom.get(route[0])!);
        return [...route, start];
      }
      if (!cameFrom.has(next)) {
        cameFrom.set(next, node);
        queue.push(next);
      }
    }
  }
  return [start, start];
}

interface FunctionLength {
  where: string;
  lines: number;
}

function isFunctionLike(node: ts.Node): boolean {
  return (
    ts.isFunctionDeclaration(node) ||
    ts.isFunctionExpression(node) ||
    ts.isArrowFunction(node) ||
    ts.isMethodDeclaration(node) ||
    ts.isConstructorDeclaration(node) ||
    ts.isGetAccessorDeclaration(node) ||
    ts.isSetAccessorDeclaration(node)
  );
}

/** The outermost functions of a TypeScript file with their lengths; nested closures count toward them. */
function typescriptFunctions(file: string): FunctionLength[] {
  const source = parse(file);
  const found: FunctionLength[] = [];
  const line = (pos: number) => source.getLineAndCharacterOfPosition(pos).line;
  const visit = (node: ts.Node): void => {
    if (!isFunctionLike(node)) {
      ts.forEachChild(node, visit);
      return;
    }
    const name = (node as ts.FunctionLikeDeclaration).name?.getText(source) ?? '<anonymous>';
    const lines = line(node.getEnd()) - line(node.getStart(source)) + 1;
    found.push({ where: `${path.relative(ROOT, file)}:${line(node.getStart(source)) + 1} ${name}`, lines });
  };
  visit(source);
  return found;
}

/** The outermost functions and methods of every engine file, measured by Python's own parser. */
function pythonFunctions(): FunctionLength[] {
  const python = process.env.ENGINE_PYTHON ?? path.join(ROOT, '.venv/bin/python');
  const script = `
import ast, json, sys
found = []
def visit(node, file):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append({"where": f"{file}:{child.lineno} {child.name}", "lines": child.end_lineno - child.lineno + 1})
        else:
            visit(child, file)
for file in sys.argv[1:]:
    with open(file, encoding="utf-8") as handle:
        visit(ast.parse(handle.read(), file), file)
print(json.dumps(found))
`;
  const files = filesUnder(path.join(ROOT, 'engine'), ['.py']).map((file) => path.relative(ROOT, file));
  return JSON.parse(execFileSync(python, ['-c', script, ...files], { cwd: ROOT, encoding: 'utf8' }));
}

describe('code structure', () => {
  test('src/ has no import cycle between files', () => {
    assert.deepEqual(cycles(importGraph()), []);
  });

  test('no top-level folder or root file of src/ imports one that imports it back (services never import jobs)', () => {
    assert.deepEqual(cycles(folderGraph(importGraph())), []);
  });

  test('inside a folder of src/, no subfolder imports a file of the folder that imports it back', () => {
    const files = importGraph();
    const found = foldersWithSubfolders(files.keys()).flatMap((folder) => cycles(folderGraph(files, folder)));
    assert.deepEqual(found, []);
  });

  test(`no function in src/, web/src or engine/ is longer than ${MAX_FUNCTION_LINES} lines`, () => {
    const typescript = [SRC, path.join(ROOT, 'web/src')].flatMap((dir) => filesUnder(dir, ['.ts', '.tsx']));
    const all = [...typescript.flatMap(typescriptFunctions), ...pythonFunctions()].sort((a, b) => b.lines - a.lines);
    for (const { where, lines } of all.slice(0, 5)) console.log(`${String(lines).padStart(4)} lines  ${where}`);
    const tooLong = all
      .filter(({ lines }) => lines > MAX_FUNCTION_LINES)
      .map(({ where, lines }) => `${where} (${lines})`);
    assert.deepEqual(tooLong, []);
  });
});
