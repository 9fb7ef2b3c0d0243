/**
 * The fuzzer's W&B half: documents drawn from the W&B schema this server serves (random selections, aliases,
 * fragments spread several times, arguments and variables of every input type, depths on both sides of the
 * limit) and, among them, those that once cost without bound (an artifactSequence → latestArtifact chain hundreds of
 * levels deep, a hundred aliased createArtifact mutations); and upload URLs: real ones a seeded pending artifact was
 * given, the same tampered with (a MAC of the right length with a multi-byte character, a payload changed, segments
 * added), and forged ones, each PUT with its declared bytes or others.
 */
import crypto from 'node:crypto';
import {
  buildSchema,
  type GraphQLField,
  type GraphQLInputType,
  type GraphQLObjectType,
  getNamedType,
  isEnumType,
  isInputObjectType,
  isListType,
  isNonNullType,
  isObjectType,
  isScalarType,
} from 'graphql';
import { WANDB_SCHEMA_SDL } from '../../src/wandb/schemas.ts';
import type { Ctx } from './endpoints.ts';
import { hugeString } from './hostile.ts';
import type { Prng } from './prng.ts';
import { ARTIFACT_NAMES, PROJECT } from './world.ts';

const SCHEMA = buildSchema(WANDB_SCHEMA_SDL);

/** An upload URL a seeded pending artifact was given, and the bytes it was issued for. */
export interface SeededUpload {
  token: string;
  body: string;
}

const md5 = (text: string) => crypto.createHash('md5').update(text).digest('base64');
const basic = (key: string) => `Basic ${Buffer.from(`api:${key}`).toString('base64')}`;

async function gql(url: string, key: string, query: string, variables: Record<string, unknown>): Promise<any> {
  const response = await fetch(`${url}/graphql`, {
    method: 'POST',
    headers: { authorization: basic(key), 'content-type': 'application/json' },
    body: JSON.stringify({ query, variables }),
  });
  const answer = (await response.json()) as { data?: any; errors?: unknown };
  if (response.status !== 200 || answer.errors) throw new Error(`seeding W&B: ${JSON.stringify(answer)}`);
  return answer.data;
}

/** A pending artifact of `entity` with upload URLs for two files and its manifest (nothing uploaded yet). */
export async function seedWandbUploads(url: string, entity: string, key: string): Promise<SeededUpload[]> {
  const created = await gql(
    url,
    key,
    'mutation C($input: CreateArtifactInput!) { createArtifact(input: $input) { artifact { id } } }',
    {
      input: {
        artifactTypeName: 'dataset',
        artifactCollectionName: 'fresh',
        entityName: entity,
        projectName: PROJECT,
        digest: '0'.repeat(32),
      },
    },
  );
  const id = created.createArtifact.artifact.id as string;
  const files = { 'train.jsonl': '{"messages": []}\n', 'notes.txt': 'fuzz' };
  const specs = Object.entries(files).map(([name, text]) => ({ artifactID: id, name, md5: md5(text) }));
  const uploads = await gql(
    url,
    key,
    'mutation F($input: CreateArtifactFilesInput!) { createArtifactFiles(input: $input) { files { edges { node { uploadUrl } } } } }',
    { input: { artifactFiles: specs, storageLayout: 'V2' } },
  );
  const manifest = '{"version": 1, "contents": {}}';
  const target = await gql(
    url,
    key,
    'mutation M($id: ID!, $digest: String!) { createArtifactManifest(input: {artifactID: $id, name: "wandb_manifest.json", digest: $digest, entityName: "x", projectName: "x", runName: "x", type: FULL}) { artifactManifest { file { uploadUrl } } } }',
    { id, digest: md5(manifest) },
  );
  const tokenOf = (uploadUrl: string) => new URL(uploadUrl).pathname.split('/').at(-1) as string;
  return [
    ...uploads.createArtifactFiles.files.edges.map((edge: any, i: number) => ({
      token: tokenOf(edge.node.uploadUrl),
      body: Object.values(files)[i],
    })),
    { token: tokenOf(target.createArtifactManifest.artifactManifest.file.uploadUrl), body: manifest },
  ];
}

/** An upload URL token: a real one, one tampered with, or a forgery. */
export function uploadToken(c: Ctx): { token: string; body: string } {
  const { rng } = c;
  const real = c.target.uploads.length > 0 ? rng.pick(c.target.uploads) : { token: 'x.y', body: 'x' };
  const [payload, mac] = real.token.split('.');
  return rng.weighted<{ token: string; body: string }>([
    [3, real],
    // The MAC's 43 characters, one of them two bytes long: comparing it once threw (a 500 with no key at all).
    [3, { token: `${payload}.${mac.slice(0, -1)}é`, body: real.body }],
    [1, { token: `${payload}.${mac.slice(0, -1)}${rng.pick(['€', '𝄞', '\u0000', '%'])}`, body: real.body }],
    [1, { token: `${Buffer.from('{"kind":"run_file","expires":9e15}').toString('base64url')}.${mac}`, body: 'x' }],
    [1, { token: `${payload}.${mac}.${rng.word()}`, body: real.body }],
    [1, { token: `${payload}`, body: real.body }],
    [1, { token: rng.pick([rng.word(), hugeString(rng), '.', '..']), body: 'x' }],
  ]);
}

/**
 * GraphQL documents that once cost without bound: a chain of lookups hundreds of levels deep, and a hundred aliased
 * mutations.
 */
export function graphqlRepro(c: Ctx): { query: string; variables?: Record<string, unknown> } {
  const { rng } = c;
  if (rng.chance(0.5)) {
    const levels = rng.pick([5, 6, 12, 200, 600, 1200]);
    return {
      query: `query Deep($id: ID!) { artifact(id: $id) { ${'artifactSequence { latestArtifact { '.repeat(levels)}id${' } }'.repeat(levels)} } }`,
      variables: { id: Buffer.from(`Artifact:${crypto.randomUUID()}`).toString('base64') },
    };
  }
  const count = rng.pick([20, 100]);
  const input = (i: number) =>
    `{artifactTypeName: "dataset", artifactCollectionName: "flood-${i}", entityName: "${c.target.name}", projectName: "${PROJECT}", digest: "${'0'.repeat(32)}"}`;
  return {
    query: `mutation Flood { ${Array.from({ length: count }, (_, i) => `a${i}: createArtifact(input: ${input(i)}) { artifact { id } }`).join(' ')} }`,
  };
}

/** A value of an input type, as a GraphQL literal: valid-looking mostly, the world's names where they fit. */
function literal(rng: Prng, c: Ctx, type: GraphQLInputType, name: string, depth = 0): string {
  if (isNonNullType(type)) return literal(rng, c, type.ofType, name, depth);
  if (rng.chance(0.04)) return 'null';
  if (isListType(type))
    return `[${Array.from({ length: rng.int(3) }, () => literal(rng, c, type.ofType, name, depth + 1)).join(', ')}]`;
  if (isEnumType(type)) return rng.pick(type.getValues()).name;
  if (isInputObjectType(type)) {
    const fields = Object.values(type.getFields()).filter((field) => isNonNullType(field.type) || rng.chance(0.3));
    return `{${fields.map((field) => `${field.name}: ${literal(rng, c, field.type, field.name, depth + 1)}`).join(', ')}}`;
  }
  const scalar = isScalarType(type) ? type.name : 'String';
  if (scalar === 'Boolean') return String(rng.chance(0.5));
  if (scalar === 'Int' || scalar === 'Int64') return String(rng.pick([0, 1, 7, -1, 2 ** 31]));
  if (scalar === 'JSONString') return JSON.stringify(rng.pick(['{}', '{"a": 1}', 'not json', '[]']));
  if (/entity/i.test(name)) return JSON.stringify(rng.pick([c.target.name, c.world.b.name, rng.word()]));
  if (/project|model/i.test(name)) return JSON.stringify(rng.pick([PROJECT, rng.word()]));
  if (/collection|^name$/i.test(name)) return JSON.stringify(rng.pick([...ARTIFACT_NAMES, rng.word(), 'a/b']));
  if (scalar === 'ID') return JSON.stringify(Buffer.from(`Artifact:${crypto.randomUUID()}`).toString('base64'));
  return JSON.stringify(rng.pick([rng.word(), '0'.repeat(32), '', 'é']));
}

/** A selection set on `type`: a few of its fields (aliased now and then), nested up to `depth` more levels. */
function selection(rng: Prng, c: Ctx, type: GraphQLObjectType, depth: number, fragments: string[]): string {
  const fields = Object.values(type.getFields()) as GraphQLField<unknown, unknown>[];
  const chosen = Array.from({ length: 1 + rng.int(3) }, () => rng.pick(fields));
  const parts = chosen.map((field) => {
    const alias = rng.chance(0.1) ? `${rng.word(3)}_${rng.int(99)}: ` : '';
    const args = field.args.filter((arg) => isNonNullType(arg.type) || rng.chance(0.3));
    const argText =
      args.length > 0 ? `(${args.map((arg) => `${arg.name}: ${literal(rng, c, arg.type, arg.name)}`).join(', ')})` : '';
    const named = getNamedType(field.type);
    if (!isObjectType(named)) return `${alias}${field.name}${argText}`;
    const inner = depth <= 0 ? '__typename' : selection(rng, c, named, depth - 1, fragments);
    return `${alias}${field.name}${argText} { ${inner} }`;
  });
  // Now and then the selection becomes a fragment, spread more than once.
  if (rng.chance(0.1)) {
    const name = `F${fragments.length}`;
    fragments.push(`fragment ${name} on ${type.name} { ${parts.join(' ')} }`);
    return Array.from({ length: 1 + rng.int(3) }, () => `...${name}`).join(' ');
  }
  return parts.join(' ');
}

/** A document drawn from the schema: a query or a mutation, nested mostly a few levels, sometimes past the limit. */
export function graphqlDocument(c: Ctx): { query: string } {
  const { rng } = c;
  const root = rng.chance(0.6) ? SCHEMA.getQueryType() : SCHEMA.getMutationType();
  const depth = rng.weighted<number>([
    [6, 1 + rng.int(5)],
    [2, 8 + rng.int(6)],
    [1, 20 + rng.int(40)],
  ]);
  const fragments: string[] = [];
  const body = selection(rng, c, root as GraphQLObjectType, depth, fragments);
  return { query: `${root === SCHEMA.getQueryType() ? 'query' : 'mutation'} Drawn { ${body} } ${fragments.join(' ')}` };
}
