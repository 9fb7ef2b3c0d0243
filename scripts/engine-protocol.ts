/**
 * `npm run protocol`: writes what engine/protocol.json (the engine protocol's one home) implies on this side of
 * the wire: src/engine/protocol.ts (every message as a TypeScript type, the op table, the enums' lists and the
 * defaults the client fills) and the op table of docs/engine-protocol.md. test/engine-ops.test.ts fails when
 * either differs from what this generates, so a schema change is a regeneration, never a hand edit.
 *
 * The schema is JSON Schema (the keywords engine/schema.py checks, plus `x-list`, `x-keyof`, `x-client-fills`,
 * `x-event`; protocol.json's `about` says what each means). A field is optional here when the wire lets it be
 * absent, or when the client fills it (a `default`, or `x-client-fills`).
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export const ROOT = path.resolve(import.meta.dirname, '..');
export const SCHEMA_FILE = path.join(ROOT, 'engine', 'protocol.json');
export const TYPES_FILE = path.join(ROOT, 'src', 'engine', 'protocol.ts');
export const DOC_FILE = path.join(ROOT, 'docs', 'engine-protocol.md');
const DOC_BEGIN = '<!-- op table: generated from engine/protocol.json by `npm run protocol` -->';
const DOC_END = '<!-- end of the generated op table -->';

export interface SchemaNode {
  $ref?: string;
  type?: string | string[];
  enum?: unknown[];
  const?: unknown;
  oneOf?: SchemaNode[];
  items?: SchemaNode | false;
  prefixItems?: SchemaNode[];
  properties?: Record<string, SchemaNode>;
  required?: string[];
  additionalProperties?: SchemaNode | boolean;
  description?: string;
  default?: unknown;
  examples?: unknown[];
  'x-list'?: string;
  'x-keyof'?: string;
  'x-client-fills'?: string;
}

export interface OpSpec {
  role: 'sampler' | 'trainer' | 'both';
  streams: boolean;
  every?: true;
  thread: 'reader' | 'compute' | 'training';
  request: SchemaNode;
  reply: SchemaNode;
  'x-event'?: SchemaNode;
  examples: unknown[];
}

export interface ProtocolSchema {
  about: string;
  $defs: Record<string, SchemaNode>;
  ops: Record<string, OpSpec>;
}

export function readSchema(): ProtocolSchema {
  return JSON.parse(readFileSync(SCHEMA_FILE, 'utf8')) as ProtocolSchema;
}

const pascal = (op: string) => op.replace(/(^|_)(\w)/g, (_match, _sep, letter: string) => letter.toUpperCase());
const refName = (ref: string) => ref.slice(ref.lastIndexOf('/') + 1);
const literal = (value: unknown) => (typeof value === 'string' ? `'${value}'` : JSON.stringify(value));
const WIDTH = 120;

/** A doc comment, on one line when it fits, else wrapped at the formatter's width. */
function doc(text: string | undefined, indent = ''): string {
  if (!text) return '';
  if (indent.length + text.length + 7 <= WIDTH) return `${indent}/** ${text} */\n`;
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line && indent.length + 3 + line.length + 1 + word.length > WIDTH) {
      lines.push(line);
      line = word;
    } else line = line ? `${line} ${word}` : word;
  }
  lines.push(line);
  return `${indent}/**\n${lines.map((l) => `${indent} * ${l}`).join('\n')}\n${indent} */\n`;
}

/** A def is named in TypeScript when it is more than an alias of a plain type: an object with fields, a list, an enum. */
function named(def: SchemaNode): boolean {
  return Boolean(def.properties || def.enum || def['x-keyof'] || def.prefixItems || def.oneOf);
}

class Writer {
  constructor(private readonly schema: ProtocolSchema) {}

  /** The TypeScript type of a schema node, as a caller writes it: the fields the client fills are optional. */
  type(node: SchemaNode): string {
    if (node.$ref) {
      const name = refName(node.$ref);
      const def = this.schema.$defs[name];
      return named(def) ? name : this.type(def);
    }
    if (node.oneOf) return node.oneOf.map((branch) => this.type(branch)).join(' | ');
    if (node.const !== undefined) return literal(node.const);
    if (node.enum) return node.enum.map(literal).join(' | ');
    if (node['x-keyof']) return `keyof ${node['x-keyof']}`;
    const types = Array.isArray(node.type) ? node.type : node.type ? [node.type] : [];
    if (types.length === 0) return 'unknown';
    return types.map((type) => this.single(type, node)).join(' | ');
  }

  private single(type: string, node: SchemaNode): string {
    switch (type) {
      case 'integer':
      case 'number':
        return 'number';
      case 'string':
      case 'boolean':
      case 'null':
        return type;
      case 'array': {
        if (node.prefixItems) return `[${node.prefixItems.map((item) => this.type(item)).join(', ')}]`;
        const item = node.items ? this.type(node.items) : 'unknown';
        return /[ |]/.test(item) ? `(${item})[]` : `${item}[]`;
      }
      default:
        return this.object(node, '');
    }
  }

  /** An object type: its fields with their doc comments, or a record where it has no declared fields. */
  object(node: SchemaNode, indent: string): string {
    const properties = Object.entries(node.properties ?? {});
    if (properties.length === 0) {
      const extra = node.additionalProperties;
      if (extra === false || (node.properties && extra === undefined)) return 'Record<string, never>';
      return `Record<string, ${typeof extra === 'object' ? this.type(extra) : 'unknown'}>`;
    }
    const required = new Set(node.required ?? []);
    const fields = properties.map(([name, field]) => {
      const resolved = field.$ref ? { ...this.schema.$defs[refName(field.$ref)], ...field } : field;
      const filled = resolved.default !== undefined || resolved['x-client-fills'] !== undefined;
      const optional = !required.has(name) || filled;
      const note = [
        field.description,
        resolved['x-client-fills'] && `The client fills it when left out: ${resolved['x-client-fills']}.`,
      ]
        .filter(Boolean)
        .join(' ');
      return `${doc(note, `${indent}  `)}${indent}  ${name}${optional ? '?' : ''}: ${this.type(field)};`;
    });
    return `{\n${fields.join('\n')}\n${indent}}`;
  }

  /** One named type: an interface for an object with fields, else a type alias (with its list for an `x-list`). */
  declaration(name: string, node: SchemaNode): string {
    const comment = doc(node.description);
    if (node['x-list']) {
      const list = `export const ${node['x-list']} = [${(node.enum ?? []).map(literal).join(', ')}] as const;`;
      return `${comment}${list}\nexport type ${name} = (typeof ${node['x-list']})[number];`;
    }
    if (node.properties && Object.keys(node.properties).length > 0)
      return `${comment}export interface ${name} ${this.object(node, '')}`;
    return `${comment}export type ${name} = ${this.type(node)};`;
  }
}

const HEADER = `/**
 * The engine protocol's messages as TypeScript types: GENERATED from engine/protocol.json by
 * scripts/engine-protocol.ts (\`npm run protocol\`). Do not edit; change the schema and regenerate
 * (test/engine-ops.test.ts fails when this file is not what the schema generates).
 *
 * Field for field the wire's (snake_case on purpose: these objects go on the wire unchanged). Requests omit \`id\`
 * and \`op\`; the client adds them, and fills the fields a caller may leave out (GENERATE_DEFAULTS, a forward
 * row's segment_ids), so the engine gets every field explicitly. ops.ts builds the engine interfaces on OPS.
 */`;

/** src/engine/protocol.ts as the schema implies it (before the formatter lays it out). */
export function typesSource(schema: ProtocolSchema): string {
  const writer = new Writer(schema);
  const parts: string[] = [HEADER];
  for (const [name, def] of Object.entries(schema.$defs)) if (named(def)) parts.push(writer.declaration(name, def));
  for (const [op, spec] of Object.entries(schema.ops)) parts.push(...opDeclarations(writer, op, spec));
  parts.push(opTable(schema));
  return `${parts.join('\n\n')}\n`;
}

function opDeclarations(writer: Writer, op: string, spec: OpSpec): string[] {
  const name = pascal(op);
  const out = [writer.declaration(`${name}Request`, spec.request), writer.declaration(`${name}Reply`, spec.reply)];
  const defaults = Object.entries(spec.request.properties ?? {}).filter(([, field]) => field.default !== undefined);
  if (defaults.length > 0)
    out.push(
      `/** What ${op}'s fields mean when a caller leaves them out; the client fills them in (engine/protocol.json). */\n` +
        `export const ${op.toUpperCase()}_DEFAULTS = {\n${defaults.map(([field, node]) => `  ${field}: ${JSON.stringify(node.default)},`).join('\n')}\n} as const satisfies Partial<${name}Request>;`,
    );
  if (spec['x-event'])
    out.push(
      `/** The final reply of a ${op} request, tagged by the client so the stream is one union. */\n` +
        `export interface ${name}DoneEvent extends ${name}Reply {\n  type: 'done';\n}`,
      `/** What a ${op} stream yields: its interim replies, then the tagged final one. */\n` +
        `export type ${name}Event = ${writer.type(spec['x-event'])} | ${name}DoneEvent;`,
    );
  return out;
}

function opTable(schema: ProtocolSchema): string {
  const types = Object.keys(schema.ops).map((op) => {
    const name = pascal(op);
    const reply = schema.ops[op]['x-event'] ? `${name}Event` : `${name}Reply`;
    return `  ${op}: { request: ${name}Request; reply: ${reply} };`;
  });
  const rows = Object.entries(schema.ops).map(
    ([op, spec]) => `  ${op}: { role: '${spec.role}', streams: ${spec.streams}${spec.every ? ', every: true' : ''} },`,
  );
  return [
    `/** Op name → what its request carries and what its (final) reply holds; a streaming op's reply is its events. */\nexport interface OpTypes {\n${types.join('\n')}\n}`,
    'export type OpName = keyof OpTypes;',
    `/**\n * \`sampler\`: only a sampler serves it; \`trainer\`: only the trainer; \`both\`: either. With several samplers,\n * \`every\` sends the op to each of them (state every sampler must hold, or a cancel whose stream may be on any).\n */\nexport interface OpInfo {\n  role: 'sampler' | 'trainer' | 'both';\n  streams: boolean;\n  every?: true;\n}`,
    `/** The op table: who serves each op, whether it streams, and whether every sampler of a pool gets it. */\nexport const OPS = {\n${rows.join('\n')}\n} as const satisfies Record<OpName, OpInfo>;`,
  ].join('\n\n');
}

/** The op table of docs/engine-protocol.md, between its markers. */
export function docTable(schema: ProtocolSchema): string {
  const yes = (flag: boolean | undefined) => (flag ? 'yes' : 'no');
  const rows = Object.entries(schema.ops).map(
    ([op, spec]) => `| \`${op}\` | ${spec.role} | ${yes(spec.streams)} | ${yes(spec.every)} | ${spec.thread} |`,
  );
  return [DOC_BEGIN, '| op | role | streams | every | thread |', '|---|---|---|---|---|', ...rows, DOC_END].join('\n');
}

/** The doc with its op table replaced by the schema's. */
export function docSource(schema: ProtocolSchema, current: string): string {
  const start = current.indexOf(DOC_BEGIN);
  const end = current.indexOf(DOC_END);
  if (start < 0 || end < start) throw new Error(`${DOC_FILE} has no generated op table markers`);
  return current.slice(0, start) + docTable(schema) + current.slice(end + DOC_END.length);
}

/** Lays the source out as `npm run format` would, so the committed file passes the linter unchanged. */
export function formatted(source: string, file: string): string {
  return execFileSync(path.join(ROOT, 'node_modules', '.bin', 'biome'), ['format', `--stdin-file-path=${file}`], {
    input: source,
    encoding: 'utf8',
    cwd: ROOT,
  });
}

/** Both generated files' contents, as they should be committed. */
export function generated(): { types: string; doc: string } {
  const schema = readSchema();
  return {
    types: formatted(typesSource(schema), TYPES_FILE),
    doc: docSource(schema, readFileSync(DOC_FILE, 'utf8')),
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { types, doc: docText } = generated();
  writeFileSync(TYPES_FILE, types);
  writeFileSync(DOC_FILE, docText);
  console.log(`wrote ${path.relative(ROOT, TYPES_FILE)} and the op table of ${path.relative(ROOT, DOC_FILE)}`);
}
