/**
 * `upload`: files (or every file of folders) → one new artifact version, streamed as multipart with a
 * progress bar; answers the artifact with its `wandb-artifact:///…` URL.
 */
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { ArtifactVersion } from '../api/artifacts.ts';
import type { ServiceClient } from './client.ts';
import { formatBytes, ProgressBar } from './progress.ts';

/** What an upload answers: the new version, with the URL SFT jobs take. */
export type UploadedArtifact = Pick<ArtifactVersion, 'url' | 'version' | 'files'>;

/** The files named, with every regular file directly inside a named folder. */
export function collectFiles(inputs: string[]): string[] {
  return inputs.flatMap((input) => {
    const stat = fs.statSync(input);
    if (!stat.isDirectory()) return [input];
    return fs
      .readdirSync(input)
      .map((name) => path.join(input, name))
      .filter((file) => fs.statSync(file).isFile())
      .sort();
  });
}

export async function uploadFiles(
  client: ServiceClient,
  target: { entity: string; project: string; name: string },
  inputs: string[],
): Promise<UploadedArtifact> {
  const files = collectFiles(inputs);
  if (files.length === 0) throw new Error('nothing to upload');
  const boundary = `----upload${crypto.randomBytes(12).toString('hex')}`;
  const total = files.reduce((sum, file) => sum + fs.statSync(file).size, 0);
  const bar = new ProgressBar('upload', total, formatBytes);
  let sent = 0;
  const encoder = new TextEncoder();
  async function* body(): AsyncGenerator<Uint8Array> {
    for (const file of files) {
      yield encoder.encode(
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${path.basename(file)}"\r\nContent-Type: application/octet-stream\r\n\r\n`,
      );
      for await (const chunk of fs.createReadStream(file)) {
        sent += (chunk as Buffer).length;
        bar.update(sent, path.basename(file));
        yield chunk as Buffer;
      }
      yield encoder.encode('\r\n');
    }
    yield encoder.encode(`--${boundary}--\r\n`);
  }
  const response = await client.fetch(`/v1/preview/artifacts/${target.entity}/${target.project}/${target.name}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${client.key}`, 'content-type': `multipart/form-data; boundary=${boundary}` },
    // undici streams an async iterable as the request body (chunked), so nothing is held in memory.
    body: body() as unknown as BodyInit,
    duplex: 'half',
  } as RequestInit);
  const text = await response.text();
  if (!response.ok) throw new Error(`upload answered ${response.status}: ${text}`);
  bar.done();
  return JSON.parse(text) as UploadedArtifact;
}
