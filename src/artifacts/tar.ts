/**
 * A streamed ustar archive of regular files: enough for a checkpoint export that `tar -xf`, Python's
 * `tarfile` and every archive tool read, without buffering the files or depending on a tar package.
 */
import type { FileHandle } from 'node:fs/promises';
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
    if (written !== entry.size)
      throw new Error(`${entry.name} changed while archived: ${written} bytes, expected ${entry.size}`);
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

/** One member of an archive on disk: where its bytes are. */
export interface TarMember {
  name: string;
  /** '0' a regular file, '5' a folder; anything else (links, devices) is refused by callers. */
  type: string;
  offset: number;
  size: number;
}

function readField(block: Buffer, offset: number, length: number): string {
  const raw = block.subarray(offset, offset + length);
  const end = raw.indexOf(0);
  return raw.subarray(0, end === -1 ? length : end).toString('utf8');
}

/** The members of a ustar (or old-style) archive held in a file; throws a plain message on anything malformed. */
export async function listTar(handle: FileHandle): Promise<TarMember[]> {
  const { size: total } = await handle.stat();
  const members: TarMember[] = [];
  const block = Buffer.alloc(BLOCK);
  for (let at = 0; at + BLOCK <= total; ) {
    await handle.read(block, 0, BLOCK, at);
    if (block.every((byte) => byte === 0)) return members;
    const stored = parseInt(readField(block, 148, 8).trim() || 'x', 8);
    const sum = block.reduce((acc, byte, i) => acc + (i >= 148 && i < 156 ? 32 : byte), 0);
    if (stored !== sum) throw new Error(`not a tar archive (bad header checksum at byte ${at})`);
    const size = parseInt(readField(block, 124, 12).trim() || '0', 8);
    const prefix = readField(block, 345, 155);
    const name = readField(block, 0, 100);
    const member = {
      name: prefix ? `${prefix}/${name}` : name,
      type: readField(block, 156, 1) || '0',
      offset: at + BLOCK,
      size,
    };
    if (member.offset + size > total) throw new Error(`truncated tar archive (${member.name} runs past its end)`);
    members.push(member);
    at = member.offset + Math.ceil(size / BLOCK) * BLOCK;
  }
  throw new Error('truncated tar archive (no end-of-archive marker)');
}
