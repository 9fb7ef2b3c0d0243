/** A multipart/form-data body built by hand, so tests control file names exactly (including hostile ones). */
import crypto from 'node:crypto';

export function multipartBody(files: { name: string; content: string | Buffer }[]): {
  payload: Buffer;
  headers: Record<string, string>;
} {
  const boundary = `----test${crypto.randomBytes(8).toString('hex')}`;
  const parts: Buffer[] = [];
  for (const file of files) {
    parts.push(
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="${file.name}"\r\nContent-Type: application/octet-stream\r\n\r\n`,
      ),
    );
    parts.push(Buffer.isBuffer(file.content) ? file.content : Buffer.from(file.content));
    parts.push(Buffer.from('\r\n'));
  }
  parts.push(Buffer.from(`--${boundary}--\r\n`));
  return { payload: Buffer.concat(parts), headers: { 'content-type': `multipart/form-data; boundary=${boundary}` } };
}
