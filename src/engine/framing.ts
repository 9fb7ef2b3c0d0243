/**
 * The wire framing of the engine protocol: a 4-byte big-endian length, then that many bytes of
 * UTF-8 JSON. Knows bytes and JSON only; what a message means is the client's business.
 */

/** Far above any real reply (a large `forward` batch is a few MB), far below V8's string limit. */
export const MAX_FRAME_BYTES = 256 * 1024 * 1024;

const HEADER_BYTES = 4;

export class FramingError extends Error {}

export function encodeFrame(message: object): Buffer {
  const body = Buffer.from(JSON.stringify(message), 'utf8');
  if (body.length > MAX_FRAME_BYTES) throw new FramingError(`frame of ${body.length} bytes exceeds ${MAX_FRAME_BYTES}`);
  const header = Buffer.alloc(HEADER_BYTES);
  header.writeUInt32BE(body.length, 0);
  return Buffer.concat([header, body]);
}

/** Parses a frame body; the result is `unknown` until the client has looked at its shape. */
export function parseFrame(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8'));
  } catch (error) {
    throw new FramingError(`frame is not valid JSON: ${(error as Error).message}`);
  }
}

/**
 * Reassembles frame bodies from arbitrary chunks. Chunks are kept as a list and joined once per
 * frame, so a large frame arriving in many small chunks costs linear, not quadratic, copying.
 */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private expected: number | undefined;

  /** Feeds a chunk; returns the bodies of every frame it completed, in order. */
  push(chunk: Buffer): Buffer[] {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const frames: Buffer[] = [];
    for (;;) {
      if (this.expected === undefined) {
        if (this.buffered < HEADER_BYTES) break;
        this.expected = this.take(HEADER_BYTES).readUInt32BE(0);
        if (this.expected > MAX_FRAME_BYTES) {
          throw new FramingError(`frame of ${this.expected} bytes exceeds ${MAX_FRAME_BYTES}`);
        }
      }
      if (this.buffered < this.expected) break;
      frames.push(this.take(this.expected));
      this.expected = undefined;
    }
    return frames;
  }

  /** Bytes of an unfinished frame still held, header included. */
  get pendingBytes(): number {
    return this.buffered + (this.expected === undefined ? 0 : HEADER_BYTES);
  }

  private take(length: number): Buffer {
    const joined = this.chunks.length === 1 ? this.chunks[0] : Buffer.concat(this.chunks);
    this.chunks = joined.length > length ? [joined.subarray(length)] : [];
    this.buffered -= length;
    return joined.subarray(0, length);
  }
}
