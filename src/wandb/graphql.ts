/**
 * W&B's GraphQL endpoint over the W&B services: graphql-js parses, validates against our subset of W&B's schema
 * (src/wandb/schemas.ts) and executes; the resolvers here shape the services' views into W&B's objects (opaque ids,
 * upload URLs under this server's own address). A query for a field outside the subset fails validation with
 * graphql-js's message naming the field, and we add which part of W&B this server serves.
 */
import {
  buildSchema,
  type DocumentNode,
  type ExecutionResult,
  execute,
  type FragmentDefinitionNode,
  GraphQLError,
  Kind,
  parse,
  type SelectionSetNode,
  validate,
} from 'graphql';
import { AppError } from '../errors.ts';
import type { Principal } from '../services/auth-service.ts';
import type { WandbArtifactView } from './artifacts.ts';
import type { WandbServices } from './index.ts';
import { DEFAULT_PROJECT, type WandbRunView } from './runs.ts';
import {
  type CreateArtifactFileSpecInput,
  type CreateArtifactInput,
  type CreateArtifactManifestInput,
  type GraphqlRequest,
  parseWandbId,
  UPLOAD_PATH_PREFIX,
  type UpsertBucketInput,
  WANDB_SCHEMA_SDL,
  wandbId,
} from './schemas.ts';

const SCHEMA = buildSchema(WANDB_SCHEMA_SDL);
const SERVED =
  "this server serves only the part of W&B's API that wandb.init, run.log_artifact, Artifact.wait and run.finish use";
const OUR_ID = /^[0-9a-f-]{36}$/;
/** The SDK's largest document (ArtifactByID with its fragments) is a few hundred tokens. */
const MAX_TOKENS = 10_000;
/**
 * Fields nested in one another, and fields selected in all (fragments expanded where they are spread), in one
 * document. The wandb SDK 0.31 nests at most 7 (CreateArtifactFiles; ArtifactByID 6) and selects at most 45
 * (ArtifactByID); each level can be a database lookup (`artifactSequence { latestArtifact { artifactSequence … } } }`),
 * so a document past either is refused before anything runs.
 */
export const MAX_DEPTH = 12;
export const MAX_FIELDS = 250;

const TOO_DEEP = `The GraphQL document nests fields more than ${MAX_DEPTH} deep; this server answers at most ${MAX_DEPTH} (the wandb SDK nests 7)`;

/** A document nested so deeply that parsing it overflowed the stack (over a thousand levels) is past the depth limit. */
function tooDeep(error: unknown): unknown {
  return error instanceof RangeError ? new AppError('bad_request', TOO_DEEP) : error;
}

/**
 * Why a document asks for more than these limits allow, or null. Walks its selections with a stack of its own
 * (a document nested thousands deep overflows no stack here), fragments expanded where they are spread; a fragment
 * that spreads itself is left to graphql-js's validation, which names it.
 */
export function overLimits(document: DocumentNode): string | null {
  const fragments = new Map<string, FragmentDefinitionNode>();
  for (const definition of document.definitions)
    if (definition.kind === Kind.FRAGMENT_DEFINITION) fragments.set(definition.name.value, definition);
  const stack: { set: SelectionSetNode; depth: number; spread: readonly string[] }[] = [];
  for (const definition of document.definitions)
    if (definition.kind === Kind.OPERATION_DEFINITION)
      stack.push({ set: definition.selectionSet, depth: 0, spread: [] });
  let fields = 0;
  for (let next = stack.pop(); next; next = stack.pop()) {
    for (const selection of next.set.selections) {
      if (selection.kind === Kind.FIELD) {
        fields += 1;
        if (fields > MAX_FIELDS)
          return `The GraphQL document selects more than ${MAX_FIELDS} fields (fragments counted where they are spread); this server answers at most ${MAX_FIELDS}`;
        if (next.depth + 1 > MAX_DEPTH) return TOO_DEEP;
        if (selection.selectionSet)
          stack.push({ set: selection.selectionSet, depth: next.depth + 1, spread: next.spread });
      } else if (selection.kind === Kind.INLINE_FRAGMENT) {
        stack.push({ set: selection.selectionSet, depth: next.depth, spread: next.spread });
      } else {
        const fragment = fragments.get(selection.name.value);
        if (fragment && !next.spread.includes(fragment.name.value))
          stack.push({ set: fragment.selectionSet, depth: next.depth, spread: [...next.spread, fragment.name.value] });
      }
    }
  }
  return null;
}

interface Context {
  principal: Principal;
  wandb: WandbServices;
  /** This server's address as the SDK reached it: upload URLs are built on it. */
  baseUrl: string;
}

type Entity = { id: string; name: string };

/** Our id inside a W&B artifact id ('' for anything else, which names no artifact). */
function artifactKey(id: string): string {
  const key = parseWandbId('Artifact', id);
  return key !== null && OUR_ID.test(key) ? key : '';
}

function uploadUrl(context: Context, token: string): string {
  return `${context.baseUrl}${UPLOAD_PATH_PREFIX}${token}`;
}

function entityObject(entity: Entity) {
  return { id: wandbId('Entity', entity.id), name: entity.name, organization: null };
}

function projectObject(context: Context, entity: Entity, project: string) {
  return {
    id: wandbId('Project', `${entity.name}/${project}`),
    internalId: wandbId('Project', `${entity.name}/${project}`),
    name: project,
    entity: entityObject(entity),
    // No run is kept (wandb-runs.ts): resumption finds none.
    bucket: () => null,
    artifact: async ({ name }: { name: string }) => {
      const view = await context.wandb.artifacts.byName(context.principal, { entity: entity.name, project, name });
      return view && artifactObject(context, view);
    },
  };
}

function runObject(context: Context, run: WandbRunView) {
  return {
    id: wandbId('Run', `${run.entity.name}/${run.project}/${run.name}`),
    name: run.name,
    displayName: run.displayName,
    description: run.description,
    notes: run.notes,
    config: run.config,
    summaryMetrics: null,
    wandbConfig: null,
    tags: run.tags,
    sweepName: null,
    project: projectObject(context, run.entity, run.project),
    historyLineCount: 0,
    logLineCount: 0,
    eventsLineCount: 0,
    historyTail: null,
    eventsTail: null,
  };
}

function artifactObject(context: Context, view: WandbArtifactView) {
  const entity = context.principal.entities.find((candidate) => candidate.name === view.entity) as Entity;
  const sequence = {
    __typename: 'ArtifactSequence',
    id: wandbId('ArtifactSequence', `${view.entity}/${view.project}/${view.name}`),
    name: view.name,
    project: projectObject(context, entity, view.project),
    latestArtifact: async () => {
      const latest = await context.wandb.artifacts.byName(context.principal, {
        entity: view.entity,
        project: view.project,
        name: `${view.name}:latest`,
      });
      return latest && artifactObject(context, latest);
    },
  };
  return {
    ...view,
    id: wandbId('Artifact', view.id),
    digestAlgorithm: 'MANIFEST_MD5',
    artifactSequence: sequence,
    artifactType: { name: view.type },
    ttlDurationSeconds: -2, // W&B's "no TTL"
    ttlIsInherited: false,
    tags: [],
    historyStep: null,
    commitHash: null,
    updatedAt: null,
    aliases: async () => {
      const latest = view.state === 'COMMITTED' && (await sequence.latestArtifact());
      return latest && latest.id === wandbId('Artifact', view.id)
        ? [{ id: wandbId('ArtifactAlias', `${view.id}/latest`), alias: 'latest', artifactCollection: sequence }]
        : [];
    },
  };
}

const queries = {
  viewer: (_args: unknown, { principal }: Context) => ({
    id: wandbId('User', principal.entityId),
    entity: principal.entityName,
    username: principal.entityName,
    email: null,
    flags: null,
    teams: { edges: principal.entities.slice(1).map((team) => ({ node: entityObject(team) })) },
  }),
  // No server features: the SDK then uses the plain paths served here (MD5 digests, no gzip, no OpenTelemetry).
  serverInfo: () => ({ features: [], cliVersionInfo: null, latestLocalVersionInfo: null }),
  model: (args: { name?: string | null; entityName?: string | null }, context: Context) =>
    queries.project(args, context),
  project: ({ name, entityName }: { name?: string | null; entityName?: string | null }, context: Context) =>
    projectObject(context, context.wandb.runs.entity(context.principal, entityName), name ?? DEFAULT_PROJECT),
  entity: ({ name }: { name: string }, { principal }: Context) => {
    const entity = principal.entities.find((candidate) => candidate.name === name);
    return entity ? entityObject(entity) : null;
  },
  artifact: async ({ id }: { id: string }, context: Context) => {
    const view = await context.wandb.artifacts.byId(context.principal, artifactKey(id));
    return view && artifactObject(context, view);
  },
};

function fileObject(context: Context, upload: { artifactId: string; name: string; token: string }) {
  return {
    id: wandbId('File', `${upload.artifactId}/${upload.name}`),
    name: upload.name,
    storagePath: null,
    uploadUrl: uploadUrl(context, upload.token),
    uploadHeaders: [],
    uploadMultipartUrls: null,
    artifact: () => queries.artifact({ id: wandbId('Artifact', upload.artifactId) }, context),
  };
}

const mutations = {
  upsertBucket: ({ input }: { input: UpsertBucketInput }, context: Context) => ({
    bucket: runObject(context, context.wandb.runs.upsert(context.principal, input)),
    inserted: true,
  }),
  createRunFiles: (
    { input }: { input: { entityName: string; projectName: string; runName: string; files: string[] } },
    context: Context,
  ) => ({
    runID: wandbId('Run', `${input.entityName}/${input.projectName}/${input.runName}`),
    uploadHeaders: [],
    files: context.wandb.runs
      .fileUploads(context.principal, input)
      .map(({ name, token }) => ({ name, uploadUrl: uploadUrl(context, token) })),
  }),
  createArtifact: async ({ input }: { input: CreateArtifactInput }, context: Context) => {
    const { artifact } = await context.wandb.artifacts.create(context.principal, input);
    return { artifact: artifactObject(context, artifact) };
  },
  createArtifactManifest: async ({ input }: { input: CreateArtifactManifestInput }, context: Context) => {
    const upload = await context.wandb.artifacts.manifestUpload(context.principal, {
      ...input,
      artifactID: artifactKey(input.artifactID),
    });
    return {
      artifactManifest: {
        id: wandbId('ArtifactManifest', upload.artifactId),
        file: fileObject(context, { ...upload, name: input.name }),
      },
    };
  },
  createArtifactFiles: async (
    { input }: { input: { artifactFiles: CreateArtifactFileSpecInput[] } },
    context: Context,
  ) => {
    const specs = input.artifactFiles.map((spec) => ({ ...spec, artifactID: artifactKey(spec.artifactID) }));
    return {
      files: {
        edges: (await context.wandb.artifacts.fileUploads(context.principal, specs)).map((upload) => ({
          node: fileObject(context, upload),
        })),
      },
    };
  },
  commitArtifact: async ({ input }: { input: { artifactID: string } }, context: Context) => ({
    artifact: artifactObject(
      context,
      await context.wandb.artifacts.commit(context.principal, artifactKey(input.artifactID)),
    ),
  }),
};

const ROOT = { ...queries, ...mutations };

/**
 * One GraphQL request, answered as W&B answers: `{data, errors}`. A syntax or validation error names what was
 * asked; a resolver's AppError keeps its message; anything else is reported by `onInternal` and answered vaguely.
 */
export async function executeWandbGraphql(
  context: Context,
  request: GraphqlRequest,
  onInternal: (error: unknown) => void,
): Promise<ExecutionResult> {
  let document: DocumentNode;
  try {
    document = parse(request.query, { maxTokens: MAX_TOKENS });
  } catch (error) {
    if (error instanceof GraphQLError) return { errors: [error] };
    throw tooDeep(error);
  }
  const refused = overLimits(document);
  if (refused) throw new AppError('bad_request', refused);
  let invalid: readonly GraphQLError[];
  try {
    invalid = validate(SCHEMA, document);
  } catch (error) {
    throw tooDeep(error);
  }
  if (invalid.length > 0)
    return {
      errors: invalid.map((error) => ({
        ...error.toJSON(),
        message: `${error.message} (${SERVED})`,
      })) as unknown as GraphQLError[],
    };
  const result = await execute({
    schema: SCHEMA,
    document,
    rootValue: ROOT,
    contextValue: context,
    variableValues: request.variables ?? undefined,
    operationName: request.operationName || undefined,
  });
  const errors = result.errors?.map((error) => {
    if (
      error.originalError &&
      !(error.originalError instanceof AppError) &&
      error.originalError.constructor.name !== 'GraphQLError'
    ) {
      onInternal(error.originalError);
      return { ...error.toJSON(), message: 'Internal server error' };
    }
    // An error outside any field is the request's own (a variable naming an input field W&B has and we do not).
    return error.path ? error.toJSON() : { ...error.toJSON(), message: `${error.message} (${SERVED})` };
  });
  return errors ? { ...result, errors: errors as unknown as GraphQLError[] } : result;
}
