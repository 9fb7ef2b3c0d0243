/**
 * The part of W&B's API that the `wandb` SDK (0.31, its Go `wandb-core` service) calls for `wandb.init`,
 * `run.log_artifact`, `Artifact.wait` and `run.finish`: the GraphQL schema of exactly the fields those calls read
 * and the inputs they send (every input field the SDK sends must be declared, even when null), the HTTP bodies
 * beside it, and W&B's opaque ids. A query for any other field fails validation, and the route names it.
 */
import { type Static, Type } from '@sinclair/typebox';

/** `POST /graphql`: what the SDK sends (genqlient from wandb-core, or the Python public API). */
export const GraphqlRequest = Type.Object({
  query: Type.String({ minLength: 1, maxLength: 100_000 }),
  variables: Type.Optional(Type.Union([Type.Record(Type.String(), Type.Unknown()), Type.Null()])),
  operationName: Type.Optional(Type.Union([Type.String(), Type.Null()])),
});
export type GraphqlRequest = Static<typeof GraphqlRequest>;

/** Where the SDK posts a run's history, system metrics and console output; read and dropped (README). */
export const FILE_STREAM_PATH = '/files/:entity/:project/:run/file_stream';
/** The SDK's OpenTelemetry probe and exports: a 404 there turns its telemetry off. */
export const TELEMETRY_PATH = '/sdk/otel/*';
/** Upload URLs this server issues: `PUT {base}/wandb/uploads/{signed token}`. */
export const UPLOAD_PATH_PREFIX = '/wandb/uploads/';

export const WANDB_SCHEMA_SDL = /* GraphQL */ `
  scalar JSONString
  scalar Int64
  scalar DateTime

  type Query {
    viewer: User
    serverInfo: ServerInfo
    "The project, for run resumption (RunResumeStatus)."
    model(name: String, entityName: String): Project
    project(name: String, entityName: String): Project
    entity(name: String!): Entity
    artifact(id: ID!): Artifact
  }

  type Mutation {
    upsertBucket(input: UpsertBucketInput!): UpsertBucketPayload
    createRunFiles(input: CreateRunFilesInput!): CreateRunFilesPayload
    createArtifact(input: CreateArtifactInput!): CreateArtifactPayload
    createArtifactManifest(input: CreateArtifactManifestInput!): CreateArtifactManifestPayload
    createArtifactFiles(input: CreateArtifactFilesInput!): CreateArtifactFilesPayload
    commitArtifact(input: CommitArtifactInput!): CommitArtifactPayload
  }

  type User { id: ID!, entity: String, username: String, email: String, flags: JSONString, teams: EntityConnection }
  type EntityConnection { edges: [EntityEdge!]! }
  type EntityEdge { node: Entity }
  type Entity { id: ID!, name: String!, organization: Organization }
  type Organization { coreWeaveOrganizationId: String }

  type ServerInfo { features: [ServerFeature!]!, cliVersionInfo: JSONString, latestLocalVersionInfo: LocalVersionInfo }
  type ServerFeature { name: String!, isEnabled: Boolean! }
  type LocalVersionInfo { outOfDate: Boolean!, latestVersionString: String!, versionOnThisInstanceString: String! }

  type Project {
    id: ID!
    internalId: ID!
    name: String!
    entity: Entity!
    bucket(name: String!, missingOk: Boolean): Run
    artifact(name: String!): Artifact
  }

  type Run {
    id: ID!
    name: String!
    displayName: String
    description: String
    notes: String
    config: JSONString
    summaryMetrics: JSONString
    wandbConfig(keys: [String!]): JSONString
    tags: [String!]
    sweepName: String
    project: Project
    historyLineCount: Int
    logLineCount: Int
    eventsLineCount: Int
    historyTail: String
    eventsTail: String
  }

  input UpsertBucketInput {
    id: String, name: String, groupName: String, modelName: String, entityName: String, description: String
    displayName: String, notes: String, config: JSONString, commit: String, host: String, debug: Boolean
    jobProgram: String, jobRepo: String, jobType: String, state: String, sweep: String, tags: [String!]
    summaryMetrics: JSONString, clientMutationId: String
  }
  type UpsertBucketPayload { bucket: Run, inserted: Boolean }

  input CreateRunFilesInput { entityName: String!, projectName: String!, runName: String!, files: [String!]!, clientMutationId: String }
  type CreateRunFilesPayload { runID: ID!, uploadHeaders: [String!]!, files: [RunFileUpload!]! }
  type RunFileUpload { name: String!, uploadUrl: String }

  enum ArtifactDigestAlgorithm { MANIFEST_MD5, MANIFEST_XXH128 }
  enum ArtifactState { PENDING, COMMITTED, DELETED }
  enum ArtifactManifestType { FULL, INCREMENTAL, PATCH }
  enum ArtifactStorageLayout { V1, V2 }

  input ArtifactAliasInput { artifactCollectionName: String!, alias: String! }
  input TagInput { tagCategoryName: String, tagName: String!, attributes: JSONString }
  input CreateArtifactInput {
    artifactTypeName: String!, artifactCollectionName: String, artifactCollectionNames: [String!]
    entityName: String!, projectName: String!, runName: String, description: String
    digest: String!, digestAlgorithm: ArtifactDigestAlgorithm, labels: JSONString, aliases: [ArtifactAliasInput!]
    tags: [TagInput!], metadata: JSONString, ttlDurationSeconds: Int64, historyStep: Int64
    enableDigestDeduplication: Boolean, distributedID: String, clientID: ID, sequenceClientID: ID
    storageRegion: String, clientMutationId: String
  }
  type CreateArtifactPayload { artifact: Artifact! }

  input CreateArtifactManifestInput {
    artifactID: ID!, baseArtifactID: ID, name: String!, digest: String!, entityName: String!
    projectName: String!, runName: String!, type: ArtifactManifestType, clientMutationId: String
  }
  type CreateArtifactManifestPayload { artifactManifest: ArtifactManifest! }
  type ArtifactManifest { id: ID!, file: File! }

  input UploadPartsInput { partNumber: Int64!, hexMD5: String! }
  input CreateArtifactFileSpecInput {
    artifactID: ID!, name: String!, md5: String!, mimetype: String, artifactManifestID: ID
    uploadPartsInput: [UploadPartsInput!]
  }
  input CreateArtifactFilesInput {
    artifactFiles: [CreateArtifactFileSpecInput!]!, storageLayout: ArtifactStorageLayout!
    cloudRegionID: String, clientMutationId: String
  }
  type CreateArtifactFilesPayload { files: FileConnection! }
  type FileConnection { edges: [FileEdge!]! }
  type FileEdge { node: File }
  type File {
    id: ID!
    name: String!
    storagePath: String
    uploadUrl: String
    uploadHeaders: [String!]!
    uploadMultipartUrls: UploadMultipartUrls
    artifact: Artifact
  }
  type UploadMultipartUrls { uploadID: String!, uploadUrlParts: [UploadUrlPart!]! }
  type UploadUrlPart { partNumber: Int64!, uploadUrl: String! }

  input CommitArtifactInput { artifactID: ID!, clientMutationId: String }
  type CommitArtifactPayload { artifact: Artifact! }

  type Artifact {
    id: ID!
    digest: String!
    digestAlgorithm: ArtifactDigestAlgorithm
    state: ArtifactState!
    artifactSequence: ArtifactSequence!
    versionIndex: Int
    artifactType: ArtifactType!
    description: String
    metadata: JSONString
    ttlDurationSeconds: Int64!
    ttlIsInherited: Boolean!
    tags: [Tag!]!
    historyStep: Int64
    size: Int64!
    commitHash: String
    fileCount: Int64!
    createdAt: DateTime!
    updatedAt: DateTime
    aliases: [ArtifactAlias!]!
  }
  type ArtifactType { name: String! }
  type Tag { id: ID!, name: String! }
  interface ArtifactCollection { name: String!, project: Project }
  type ArtifactSequence implements ArtifactCollection { id: ID!, name: String!, project: Project, latestArtifact: Artifact }
  type ArtifactAlias { id: ID!, alias: String!, artifactCollection: ArtifactCollection }
`;

export interface ArtifactAliasInput {
  artifactCollectionName: string;
  alias: string;
}

/** The inputs the service reads; graphql-js has already checked them against the schema above. */
export interface CreateArtifactInput {
  artifactTypeName: string;
  artifactCollectionName?: string | null;
  artifactCollectionNames?: string[] | null;
  entityName: string;
  projectName: string;
  runName?: string | null;
  description?: string | null;
  digest: string;
  digestAlgorithm?: string | null;
  labels?: string | null;
  aliases?: ArtifactAliasInput[] | null;
  tags?: { tagName: string }[] | null;
  metadata?: string | null;
  ttlDurationSeconds?: number | null;
  distributedID?: string | null;
  enableDigestDeduplication?: boolean | null;
  storageRegion?: string | null;
}

export interface CreateArtifactManifestInput {
  artifactID: string;
  name: string;
  digest: string;
  type?: string | null;
}

export interface CreateArtifactFileSpecInput {
  artifactID: string;
  name: string;
  md5: string;
  uploadPartsInput?: unknown[] | null;
}

export interface UpsertBucketInput {
  name?: string | null;
  modelName?: string | null;
  entityName?: string | null;
  displayName?: string | null;
  description?: string | null;
  notes?: string | null;
  config?: string | null;
  tags?: string[] | null;
  sweep?: string | null;
}

/** W&B ids are opaque base64 strings of `Type:key`; ours carry our own ids or names as the key. */
export function wandbId(type: string, key: string): string {
  return Buffer.from(`${type}:${key}`).toString('base64');
}

/** The key of an id made by `wandbId` for that type, or null for anything else. */
export function parseWandbId(type: string, id: string): string | null {
  const text = Buffer.from(id, 'base64').toString('utf8');
  return text.startsWith(`${type}:`) && wandbId(type, text.slice(type.length + 1)) === id
    ? text.slice(type.length + 1)
    : null;
}
