/**
 * A streamed ustar archive of regular files: enough for a checkpoint export that `tar -xf`, Python's
 * `tarfile` and every archive tool read, without buffering the files or depending on a tar package.
 */
import { Readable } from 'node:stream';

export interface TarEntry {
  name: string;
  size: number;
  /** The file's bytes, exactly `size` of them; opened only when the archive reaches this entry. */
  open(): AsyncIterable<Buffer> | Buffer;
}

const BLOCK = 512;

function field(header: Buffer, offset: number, length: number, value: string): void {
  header.write(value, offset, length, 'ascii');
}

function header(name: string, size: number, mtime: number): Buffer {
  if (Buffer.byteLength(name) > 100) throw new Error(`tar entry name too long: ${name}`);
  const block = Buffer.alloc(BLOCK);
  block.write(name, 0, 100, 'utf8');
  field(block, 100, 8, '0000644\0');
  field(block, 108, 8, '0000000\0');
  field(block, 116, 8, '0000000\0');
  field(block, 124, 12, `${size.toString(8).padStart(11, '0')}\0`);
  field(block, 136, 12, `${Math.floor(mtime).toString(8).padStart(11, '0')}\0`);
  field(block, 148, 8, ' '.repeat(8)); // counted as spaces while the checksum is summed
  field(block, 156, 1, '0');
  field(block, 257, 8, 'ustar\x0000');
  const checksum = block.reduce((sum, byte) => sum + byte, 0);
  field(block, 148, 8, `${checksum.toString(8).padStart(6, '0')}\0 `);
  return block;
}

async function* blocks(entries: TarEntry[], mtime: number): AsyncGenerator<Buffer> {
  for (const entry of entries) {
    yield header(entry.name, entry.size, mtime);
    let written = 0;
    const body = entry.open();
    for await (const chunk of Buffer.isBuffer(body) ? [body] : body) {
      written += chunk.length;
      yield chunk;
    }
    if (written !== entry.size) throw new Error(`${entry.name} changed while archived: ${written} bytes, expected ${entry.size}`);
    if (written % BLOCK) yield Buffer.alloc(BLOCK - (written % BLOCK));
  }
  yield Buffer.alloc(2 * BLOCK); // the end-of-archive marker
}

/** The archive's exact length, known before it is written (so a download can say its content-length). */
export function tarSize(entries: Pick<TarEntry, 'size'>[]): number {
  return entries.reduce((sum, entry) => sum + BLOCK + Math.ceil(entry.size / BLOCK) * BLOCK, 2 * BLOCK);
}

export function tarStream(entries: TarEntry[], mtime: number): Readable {
  return Readable.from(blocks(entries, mtime));
}
