/** src/engine/framing.ts at the byte level: length-prefixed UTF-8 JSON frames, split and joined anywhere. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { encodeFrame, FrameDecoder, FramingError, MAX_FRAME_BYTES, parseFrame } from '../../src/engine/framing.ts';

const decodeAll = (decoder: FrameDecoder, chunks: Buffer[]) =>
  chunks.flatMap((chunk) => decoder.push(chunk)).map(parseFrame);

describe('framing', () => {
  const messages = [
    { id: 'a', op: 'stats' },
    { id: 'b', text: 'héllo 👋', n: [1, 2, 3] },
    { id: null, event: 'ready' },
  ];
  const wire = Buffer.concat(messages.map(encodeFrame));

  test('a frame is a 4-byte big-endian length and UTF-8 JSON', () => {
    const frame = encodeFrame({ a: 'é' });
    assert.equal(frame.readUInt32BE(0), frame.length - 4);
    assert.equal(frame.subarray(4).toString('utf8'), '{"a":"é"}');
  });

  test('several frames in one chunk', () => {
    assert.deepEqual(decodeAll(new FrameDecoder(), [wire]), messages);
  });

  test('one byte at a time, headers and characters split anywhere', () => {
    const bytes = [...wire].map((byte) => Buffer.from([byte]));
    assert.deepEqual(decodeAll(new FrameDecoder(), bytes), messages);
  });

  test('every two-chunk split point', () => {
    for (let cut = 0; cut <= wire.length; cut++) {
      assert.deepEqual(
        decodeAll(new FrameDecoder(), [wire.subarray(0, cut), wire.subarray(cut)]),
        messages,
        `cut at ${cut}`,
      );
    }
  });

  test('a large frame in many chunks, then the next frame', () => {
    const big = { id: 'big', logprobs: Array.from({ length: 100_000 }, (_, i) => -(i + 1) / 7) };
    const bytes = Buffer.concat([encodeFrame(big), encodeFrame({ id: 'next' })]);
    const decoder = new FrameDecoder();
    const chunks = Array.from({ length: Math.ceil(bytes.length / 1000) }, (_, i) =>
      bytes.subarray(i * 1000, (i + 1) * 1000),
    );
    assert.deepEqual(decodeAll(decoder, chunks), [big, { id: 'next' }]);
    assert.equal(decoder.pendingBytes, 0);
  });

  test('an unfinished frame is held, not lost', () => {
    const decoder = new FrameDecoder();
    assert.deepEqual(decoder.push(wire.subarray(0, 6)), []);
    assert.equal(decoder.pendingBytes, 6);
  });

  test('oversized lengths and bad JSON are framing errors', () => {
    const header = Buffer.alloc(4);
    header.writeUInt32BE(MAX_FRAME_BYTES + 1, 0);
    assert.throws(() => new FrameDecoder().push(header), FramingError);
    assert.throws(() => parseFrame(Buffer.from('{nope')), FramingError);
  });
});
