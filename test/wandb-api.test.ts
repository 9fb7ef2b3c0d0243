/**
 * The W&B API subset (src/wandb/routes.ts) through the real HTTP stack, on SQLite and PostgreSQL: the calls
 * the `wandb` SDK makes for log_artifact, in its order and with its bodies (as captured from wandb 0.31), and what
 * happens when a step goes wrong: wrong keys, forged or expired upload URLs, bytes that are not the declared ones,
 * a manifest that does not match its uploads, and W&B features this server does not serve.
 * test/art-wandb-sft.test.ts runs the real SDK and ART against the real server.
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import type { Clock } from '../src/clock.ts';
import { startTestApp, type TestApp } from './helpers/app.ts';
import { backends } from './helpers/database.ts';

const md5 = (data: string) => crypto.createHash('md5').update(data).digest('base64');
const basic = (key: string) => `Basic ${Buffer.from(`api:${key}`).toString('base64')}`;

/** W&B's artifact digest over a manifest's entries (the SDK's ArtifactManifestV1.digest with MD5). */
function artifactDigest(files: Record<string, string>): string {
  const hash = crypto.createHash('md5').update('wandb-artifact-manifest-v1\n');
  for (const name of Object.keys(files).sort()) hash.update(`${name}:${md5(files[name])}\n`);
  return hash.digest('hex');
}

function manifestOf(files: Record<string, string>): string {
  const contents = Object.fromEntries(
    Object.entries(files).map(([name, text]) => [name, { digest: md5(text), size: Buffer.byteLength(text) }]),
  );
  return JSON.stringify({
    version: 1,
    storagePolicy: 'wandb-storage-policy-v1',
    storagePolicyConfig: { storageLayout: 'V2' },
    contents,
  });
}

const CREATE_ARTIFACT = `mutation CreateArtifact($input: CreateArtifactInput!) { createArtifact(input: $input) { artifact { id state artifactSequence { latestArtifact { id } } } } }`;
const CREATE_MANIFEST = `mutation CreateArtifactManifest($artifactID: ID!, $name: String!, $digest: String!, $entityName: String!, $projectName: String!, $runName: String!, $includeUpload: Boolean!) {
  createArtifactManifest(input: {artifactID: $artifactID, name: $name, digest: $digest, entityName: $entityName, projectName: $projectName, runName: $runName, type: FULL}) {
    artifactManifest { id file { id uploadUrl @include(if: $includeUpload) uploadHeaders @include(if: $includeUpload) } } } }`;
const CREATE_FILES = `mutation CreateArtifactFiles($input: CreateArtifactFilesInput!) { createArtifactFiles(input: $input) {
  files { edges { node { storagePath uploadUrl uploadHeaders uploadMultipartUrls { uploadID } artifact { id } } } } } }`;
const COMMIT = `mutation CommitArtifact($artifactID: ID!) { commitArtifact(input: {artifactID: $artifactID}) { artifact { id digest } } }`;
const ARTIFACT_BY_ID = `query ArtifactByID($id: ID!) { artifact(id: $id) { __typename id state versionIndex digest size fileCount metadata
  artifactType { name } artifactSequence { __typename name project { name entity { name } } } aliases { alias artifactCollection { __typename name } } } }`;

/** The input the SDK sends to createArtifact (every field, nulls included, as wandb-core does). */
function createInput(name: string, digest: string, extra: Record<string, unknown> = {}) {
  return {
    input: {
      aliases: [{ alias: 'latest', artifactCollectionName: name }],
      artifactCollectionName: name,
      artifactCollectionNames: null,
      artifactTypeName: 'dataset',
      clientID: 'c1',
      clientMutationId: null,
      description: null,
      digest,
      digestAlgorithm: 'MANIFEST_MD5',
      distributedID: null,
      enableDigestDeduplication: true,
      entityName: 'local',
      historyStep: null,
      labels: null,
      metadata: '{"format":"jsonl"}',
      projectName: 'wb',
      runName: 'run1',
      sequenceClientID: 's1',
      storageRegion: null,
      ttlDurationSeconds: null,
      ...extra,
    },
  };
}

for (const backend of backends()) {
  describe(`W&B API on ${backend.name}`, () => {
    let t: TestApp;
    let now = Date.now();
    const clock: Clock = { now: () => new Date(now) };
    before(async () => {
      t = await startTestApp(backend, { clock, env: { ARTIFACT_MAX_FILE_BYTES: '4096' } });
    });
    after(async () => {
      await t.close();
    });

    const gql = async (query: string, variables: Record<string, unknown> = {}, authorization = basic(t.key)) => {
      const response = await t.app.inject({
        method: 'POST',
        url: '/graphql',
        headers: { authorization, 'content-type': 'application/json' },
        payload: { query, variables },
      });
      return { status: response.statusCode, body: JSON.parse(response.body) };
    };
    const put = async (url: string, body: string) => {
      const response = await t.app.inject({
        method: 'PUT',
        url: new URL(url).pathname,
        payload: body,
        headers: { 'content-length': String(Buffer.byteLength(body)) },
      });
      return { status: response.statusCode, body: response.body ? JSON.parse(response.body) : null };
    };

    /** createArtifact → createArtifactFiles → PUT each file: the artifact id and its files' upload URLs. */
    async function startArtifact(name: string, files: Record<string, string>, digest = artifactDigest(files)) {
      const created = await gql(CREATE_ARTIFACT, createInput(name, digest));
      assert.equal(created.body.errors, undefined, JSON.stringify(created.body));
      const id = created.body.data.createArtifact.artifact.id as string;
      const manifest = await gql(CREATE_MANIFEST, {
        artifactID: id,
        name: 'wandb_manifest.json',
        digest: '',
        entityName: 'local',
        projectName: 'wb',
        runName: 'run1',
        includeUpload: false,
      });
      const specs = Object.entries(files).map(([file, text]) => ({
        artifactID: id,
        artifactManifestID: manifest.body.data.createArtifactManifest.artifactManifest.id,
        md5: md5(text),
        mimetype: null,
        name: file,
        uploadPartsInput: null,
      }));
      const urls = await gql(CREATE_FILES, {
        input: { artifactFiles: specs, clientMutationId: null, cloudRegionID: null, storageLayout: 'V2' },
      });
      assert.equal(urls.body.errors, undefined, JSON.stringify(urls.body));
      return {
        id,
        created: created.body.data.createArtifact.artifact,
        nodes: urls.body.data.createArtifactFiles.files.edges.map((edge: any) => edge.node),
      };
    }

    /** The manifest's own upload, then commitArtifact. */
    async function finishArtifact(id: string, manifest: string) {
      const target = await gql(CREATE_MANIFEST, {
        artifactID: id,
        name: 'wandb_manifest.json',
        digest: md5(manifest),
        entityName: 'local',
        projectName: 'wb',
        runName: 'run1',
        includeUpload: true,
      });
      assert.equal(
        (await put(target.body.data.createArtifactManifest.artifactManifest.file.uploadUrl, manifest)).status,
        200,
      );
      return gql(COMMIT, { artifactID: id });
    }

    test('the key arrives as basic auth; a wrong or missing key is a 401 in W&B shape', async () => {
      const viewer = await gql('query Viewer { viewer { id entity username teams { edges { node { name } } } } }');
      assert.equal(viewer.status, 200);
      assert.equal(viewer.body.data.viewer.entity, 'local');
      const wrong = await gql('query Viewer { viewer { entity } }', {}, basic(`sk-${'0'.repeat(43)}`));
      assert.equal(wrong.status, 401);
      assert.equal(wrong.body.errors[0].message, 'Invalid or revoked API key');
      const missing = await t.app.inject({
        method: 'POST',
        url: '/graphql',
        payload: { query: '{ viewer { entity } }' },
      });
      assert.equal(missing.statusCode, 401);
      assert.match(JSON.parse(missing.body).errors[0].message, /WANDB_API_KEY/);
    });

    test('log_artifact end to end: the files become the next version of entity/project/name, with the manifest honoured', async () => {
      const files = { 'train.jsonl': '{"messages": []}\n', 'extra.txt': 'hello' };
      const { id, created, nodes } = await startArtifact('chats', files);
      assert.equal(created.state, 'PENDING');
      assert.equal(created.artifactSequence.latestArtifact, null);
      assert.equal(nodes.length, 2);
      for (const node of nodes) assert.equal(node.uploadMultipartUrls, null);
      for (const [index, text] of Object.values(files).entries())
        assert.equal((await put(nodes[index].uploadUrl, text)).status, 200);
      const committed = await finishArtifact(id, manifestOf(files));
      assert.equal(committed.body.errors, undefined, JSON.stringify(committed.body));
      assert.equal(committed.body.data.commitArtifact.artifact.digest, artifactDigest(files));

      const read = (await gql(ARTIFACT_BY_ID, { id })).body.data.artifact;
      assert.equal(read.state, 'COMMITTED');
      assert.equal(read.versionIndex, 0);
      assert.equal(read.artifactType.name, 'dataset');
      assert.equal(read.metadata, '{"format":"jsonl"}');
      assert.equal(read.fileCount, 2);
      assert.deepEqual(read.artifactSequence.project, { name: 'wb', entity: { name: 'local' } });
      assert.deepEqual(read.aliases, [
        { alias: 'latest', artifactCollection: { __typename: 'ArtifactSequence', name: 'chats' } },
      ]);
      const listed = await t.call('GET', '/v1/preview/artifacts/local/wb/chats');
      assert.deepEqual(
        listed.body.data.map((version: any) => version.url),
        ['wandb-artifact:///local/wb/chats:v0'],
      );
      const download = await t.app.inject({
        method: 'GET',
        url: '/v1/preview/artifacts/local/wb/chats:v0/files/train.jsonl',
        headers: { authorization: `Bearer ${t.key}` },
      });
      assert.equal(download.body, files['train.jsonl']);

      // The same content again is W&B's deduplication: the committed version comes back and nothing new is stored.
      const again = await gql(CREATE_ARTIFACT, createInput('chats', artifactDigest(files)));
      assert.deepEqual(again.body.data.createArtifact.artifact, {
        id,
        state: 'COMMITTED',
        artifactSequence: { latestArtifact: { id } },
      });
      assert.equal((await t.call('GET', '/v1/preview/artifacts/local/wb/chats')).body.data.length, 1);
    });

    test('bytes that are not the declared ones are refused at upload, and the commit names what is missing', async () => {
      const files = { 'train.jsonl': 'declared' };
      const { id, nodes } = await startArtifact('tampered', files);
      const wrong = await put(nodes[0].uploadUrl, 'something else');
      assert.equal(wrong.status, 400);
      assert.match(wrong.body.errors[0].message, /Digest mismatch for "train.jsonl"/);
      const committed = await finishArtifact(id, manifestOf(files));
      assert.match(committed.body.errors[0].message, /"train.jsonl" was never uploaded/);
      assert.equal((await t.call('GET', '/v1/preview/artifacts/local/wb/tampered')).status, 404);
    });

    test('a manifest that does not add up to the declared digest, or leaves out an upload, is refused at commit', async () => {
      const files = { 'train.jsonl': 'one' };
      const wrongDigest = await startArtifact('wrong-digest', files, 'f'.repeat(32));
      await put(wrongDigest.nodes[0].uploadUrl, 'one');
      assert.match(
        (await finishArtifact(wrongDigest.id, manifestOf(files))).body.errors[0].message,
        /its digest is [0-9a-f]{32}, but createArtifact declared f{32}/,
      );

      const two = { 'train.jsonl': 'one', 'b.txt': 'two' };
      const partial = await startArtifact('partial', two, artifactDigest(files));
      await put(partial.nodes[0].uploadUrl, 'one');
      await put(partial.nodes[1].uploadUrl, 'two');
      assert.match(
        (await finishArtifact(partial.id, manifestOf(files))).body.errors[0].message,
        /uploaded files missing from it: "b.txt"/,
      );
      assert.equal((await t.call('GET', '/v1/preview/artifacts/local/wb/partial')).status, 404);
    });

    test('upload URLs are signed per file and expire', async () => {
      const { nodes } = await startArtifact('signed', { 'train.jsonl': 'x' });
      const url = new URL(nodes[0].uploadUrl);
      const [payload, mac] = url.pathname.split('/').at(-1)!.split('.');
      const other = JSON.parse(Buffer.from(payload, 'base64url').toString());
      other.name = 'other.jsonl';
      const forged = `${url.origin}/wandb/uploads/${Buffer.from(JSON.stringify(other)).toString('base64url')}.${mac}`;
      assert.equal((await put(forged, 'x')).status, 403);
      now += 16 * 60 * 1000;
      try {
        const expired = await put(url.href, 'x');
        assert.equal(expired.status, 403);
        assert.match(expired.body.errors[0].message, /expired/);
      } finally {
        now -= 16 * 60 * 1000;
      }
    });

    test('W&B features outside the subset are errors that name them', async () => {
      const field = await gql('query { runQueue(id: "q") { id } }');
      assert.match(
        field.body.errors[0].message,
        /Cannot query field "runQueue" on type "Query".*wandb.init, run.log_artifact/,
      );
      const tags = await gql(CREATE_ARTIFACT, createInput('tagged', 'f'.repeat(32), { tags: [{ tagName: 'x' }] }));
      assert.match(tags.body.errors[0].message, /Artifact tags: not supported by this server/);
      const alias = await gql(
        CREATE_ARTIFACT,
        createInput('aliased', 'f'.repeat(32), { aliases: [{ alias: 'best', artifactCollectionName: 'aliased' }] }),
      );
      assert.match(alias.body.errors[0].message, /aliases other than "latest" \("best"\)/);
      const input = await gql(CREATE_ARTIFACT, createInput('unknown-input', 'f'.repeat(32), { someNewField: 1 }));
      assert.match(input.body.errors[0].message, /someNewField/);
      const { id } = await startArtifact('folders', { 'train.jsonl': 'x' });
      const nested = await gql(CREATE_FILES, {
        input: { artifactFiles: [{ artifactID: id, name: 'a/b.txt', md5: md5('x') }], storageLayout: 'V2' },
      });
      assert.match(nested.body.errors[0].message, /no folders/);
      const other = await gql(CREATE_ARTIFACT, {
        input: { ...createInput('elsewhere', 'f'.repeat(32)).input, entityName: 'someone-else' },
      });
      assert.match(other.body.errors[0].message, /may not write artifacts of entity "someone-else"/);
      const sweep = await gql(
        'mutation { upsertBucket(input: {name: "r", modelName: "wb", sweep: "s1"}) { bucket { id } } }',
      );
      assert.match(sweep.body.errors[0].message, /Sweeps: not supported/);
    });

    test('runs: upsertBucket answers the run, resumption finds none, file_stream is read and dropped, telemetry is off', async () => {
      const run = await gql(
        'mutation { upsertBucket(input: {name: "run1", modelName: "wb", entityName: "local", displayName: "adder"}) { bucket { name displayName project { name entity { name } } } inserted } }',
      );
      assert.deepEqual(run.body.data.upsertBucket, {
        bucket: { name: 'run1', displayName: 'adder', project: { name: 'wb', entity: { name: 'local' } } },
        inserted: true,
      });
      const resume = await gql(
        'query { model(name: "wb", entityName: "local") { name bucket(name: "run1", missingOk: true) { id } } }',
      );
      assert.deepEqual(resume.body.data.model, { name: 'wb', bucket: null });
      const stream = await t.app.inject({
        method: 'POST',
        url: '/files/local/wb/run1/file_stream',
        headers: { authorization: basic(t.key) },
        payload: { files: {}, complete: true, exitcode: 0 },
      });
      assert.equal(stream.statusCode, 200);
      assert.equal(
        (await t.app.inject({ method: 'POST', url: '/files/local/wb/run1/file_stream', payload: {} })).statusCode,
        401,
      );
      assert.equal((await t.app.inject({ method: 'POST', url: '/sdk/otel/v1/metrics' })).statusCode, 404);
      const runFiles = await gql(
        'mutation { createRunFiles(input: {entityName: "local", projectName: "wb", runName: "run1", files: ["output.log"]}) { files { name uploadUrl } } }',
      );
      assert.equal((await put(runFiles.body.data.createRunFiles.files[0].uploadUrl, 'console output')).status, 200);
    });

    test("a run named after a model: its history lines are the model's run history, per split, each stored once", async () => {
      const model = (
        await t.call('POST', '/v1/preview/models', { project: 'wb', name: 'logged', base_model: 'test/base' })
      ).body;
      // What ART 0.5.23's model.log(split="val") at training step 3 makes the SDK send, and a train row with its sections.
      const line = (row: Record<string, unknown>) =>
        JSON.stringify({ _step: 0, _runtime: 1.5, _timestamp: 1.7e9, ...row });
      const content = [
        line({ 'val/reward': 0.5, 'val/reward_std_dev': 0.1, training_step: 3, 'time/wall_clock_sec': 9 }),
        line({
          _step: 1,
          'train/reward': 0.25,
          'loss/train': 0.7,
          'data/step_num_groups_submitted': 2,
          training_step: 4,
        }),
        'not json',
      ];
      const stream = (payload: Record<string, unknown>, path = '/files/local/wb/logged/file_stream', key = t.key) =>
        t.app.inject({ method: 'POST', url: path, headers: { authorization: basic(key) }, payload });
      const body = {
        files: { 'wandb-history.jsonl': { offset: 0, content }, 'output.log': { offset: 0, content: ['hi'] } },
      };
      for (let attempt = 0; attempt < 2; attempt += 1) assert.equal((await stream(body)).statusCode, 200);
      // The same run resumed by another process starts its file again at 0, with new lines: they are kept too.
      const resumed = {
        files: { 'wandb-history.jsonl': { offset: 0, content: [line({ 'val/reward': 1, training_step: 5 })] } },
      };
      assert.equal((await stream(resumed)).statusCode, 200);
      const history = (await t.call('GET', `/v1/dashboard/models/${model.id}/metrics?limit=50`)).body.data;
      assert.deepEqual(
        history.map((row: any) => [row.step, row.source, row.split, row.metrics]),
        [
          [3, 'wandb:val', 'val', { 'val/reward': 0.5, 'val/reward_std_dev': 0.1 }],
          [4, 'wandb:train', 'train', { 'train/reward': 0.25 }],
          [5, 'wandb:val', 'val', { 'val/reward': 1 }],
        ],
      );
      // A run named after no model is read and dropped; another entity's run path is refused.
      assert.equal((await stream(body, '/files/local/wb/no-such-model/file_stream')).statusCode, 200);
      const outsider = (await t.services.auth.createKey('wandb-history-outsider')).key;
      const refused = await stream(body, '/files/local/wb/logged/file_stream', outsider);
      assert.equal(refused.statusCode, 403, refused.body);
      assert.equal((await t.call('GET', `/v1/dashboard/models/${model.id}/metrics?limit=50`)).body.data.length, 3);
    });
  });
}
