/**
 * The parts of a multipart upload, as the artifact service reads them. busboy neither ends nor fails a part
 * when the body stops inside it, nor finishes when the closing boundary never comes, even once every byte has
 * arrived; and a part it destroys before anyone reads it never settles a pipeline. The upload waited forever,
 * holding its connection and staging folder. So each part reaches the service through a stream of our own that
 * fails with a 400 when the part breaks off, and once the body is in (and busboy has had a moment to parse the
 * last of it) a part still awaited is a 400 too.
 */
import { PassThrough, type Readable } from 'node:stream';
import type { FastifyRequest } from 'fastify';
import { AppError } from '../errors.ts';

/** Parsing the last bytes takes a few ticks; this is far beyond them and far below any client's patience. */
const PARSE_GRACE_MS = 250;

export interface UploadedPart {
  field: string;
  fileName: string | undefined;
  stream: Readable;
}

function truncated(): AppError {
  return new AppError(
    'bad_request',
    'The multipart body ended inside a part or without its closing boundary (--BOUNDARY--)',
  );
}

/** Resolves once the whole request body has arrived: one `end` listener per request, however many parts it has. */
function bodyEnded(request: FastifyRequest): Promise<void> {
  if (request.raw.readableEnded) return Promise.resolve();
  return new Promise((resolve) => request.raw.once('end', () => resolve()));
}

/** `pending`, or a 400 when the body is in and it still has not settled PARSE_GRACE_MS later. */
function settledOrTruncated<T>(ended: Promise<void>, pending: Promise<T>): Promise<T> {
  return new Promise((resolve, reject) => {
    let settled = false;
    pending.then(
      (value) => {
        settled = true;
        resolve(value);
      },
      (error: unknown) => {
        settled = true;
        reject(error);
      },
    );
    void ended.then(() =>
      setTimeout(() => {
        if (!settled) reject(truncated());
      }, PARSE_GRACE_MS).unref(),
    );
  });
}

/** busboy's part as a stream that either ends with the whole part or fails with a 400. */
function ownStream(part: Readable): Readable {
  const own = new PassThrough();
  // The failure is read by whoever pipes `own`, maybe only after it happened.
  own.on('error', () => undefined);
  const fail = () => {
    if (!part.readableEnded) own.destroy(truncated());
  };
  part.once('error', fail).once('close', fail);
  if (part.destroyed) fail();
  else part.pipe(own);
  return own;
}

export async function* multipartFiles(request: FastifyRequest): AsyncGenerator<UploadedPart> {
  const parts = request.files()[Symbol.asyncIterator]();
  const ended = bodyEnded(request);
  for (;;) {
    const next = await settledOrTruncated(ended, parts.next());
    if (next.done) return;
    yield { field: next.value.fieldname, fileName: next.value.filename, stream: ownStream(next.value.file) };
  }
}
