/** `checkpoints download`: streams a checkpoint's adapter archive to a file, with a progress bar. */
import fs from 'node:fs';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream } from 'node:stream/web';
import type { ServiceClient } from './client.ts';
import { formatBytes, ProgressBar } from './progress.ts';

/** Answers the file written: `output`, or the name the server suggests in the current folder. */
export async function downloadAdapter(
  client: ServiceClient,
  modelId: string,
  step: number,
  output: string | undefined,
): Promise<string> {
  const route = `/v1/preview/models/${encodeURIComponent(modelId)}/checkpoints/${step}/adapter`;
  const response = await client.fetch(route, { headers: { authorization: `Bearer ${client.key}` } });
  if (!response.ok || !response.body)
    throw new Error(`GET ${route} answered ${response.status}: ${await response.text()}`);
  const suggested = /filename="([^"/\\]+)"/.exec(response.headers.get('content-disposition') ?? '')?.[1];
  const file = output ?? suggested ?? `${modelId}-step${step}-adapter.tar`;
  const bar = new ProgressBar('download', Number(response.headers.get('content-length') ?? 0), formatBytes);
  let received = 0;
  const count = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      received += chunk.length;
      bar.update(received);
      done(null, chunk);
    },
  });
  // Written beside the target and renamed, so an interrupted download never leaves a truncated archive under its name.
  const partial = `${file}.partial`;
  await pipeline(Readable.fromWeb(response.body as ReadableStream), count, fs.createWriteStream(partial));
  fs.renameSync(partial, file);
  bar.done();
  return file;
}
