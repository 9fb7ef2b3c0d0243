/**
 * The protobuf messages the Tinker SDK 0.38 exchanges with us (its `tinker_public.proto`): the
 * `forward_backward` request body it always sends as protobuf, and the two results it only accepts as
 * protobuf (`SampleResponse`, `ForwardBackwardOutput`), a datum's provenance spans included. A hand-written wire
 * codec for just these fields: field numbers are the SDK's; anything else in a message is skipped.
 */
import { AppError } from '../errors.ts';

const VARINT = 0;
const FIXED64 = 1;
const BYTES = 2;
const FIXED32 = 5;
const DTYPE_FLOAT32 = 1;
const DTYPE_INT64 = 2;
const DTYPE_INT32 = 3;

export interface ProtoTensor {
  dtype: 'float32' | 'int64';
  values: number[];
}

/** One run of a datum's provenance (tinker 0.38 `ProvenanceSpan`): positions of a sampled sequence's prompt or tokens. */
export interface ProvenanceSpan {
  kind: 'prompt' | 'sampled';
  sequenceId: string;
  offset: number;
  length: number;
}

export interface ProtoDatum {
  /** Every chunk's tokens in order; a non-text chunk is refused while decoding. */
  tokens: number[];
  lossFnInputs: Record<string, ProtoTensor>;
  /** Provenance, when the client attached it (`Datum.with_provenance`): runs tiling the input and the targets. */
  modelInputSpans?: ProvenanceSpan[];
  lossFnInputSpans?: ProvenanceSpan[];
}

export interface ProtoForwardBackward {
  model_id: string;
  seq_id: number;
  loss_fn: string;
  loss_fn_config: Record<string, number>;
  forward_only: boolean;
  data: ProtoDatum[];
}

const malformed = (what: string) => new AppError('bad_request', `Malformed protobuf forward_backward request: ${what}`);

class Reader {
  private at = 0;
  constructor(private readonly bytes: Uint8Array) {}

  done(): boolean {
    return this.at >= this.bytes.length;
  }

  varint(): number {
    let result = 0;
    let scale = 1;
    for (let i = 0; i < 10; i += 1) {
      if (this.at >= this.bytes.length) throw malformed('truncated varint');
      const byte = this.bytes[this.at++];
      result += (byte & 0x7f) * scale;
      if (byte < 0x80) return result;
      scale *= 128;
    }
    throw malformed('varint too long');
  }

  take(length: number): Uint8Array {
    if (length < 0 || this.at + length > this.bytes.length) throw malformed('truncated field');
    const out = this.bytes.subarray(this.at, this.at + length);
    this.at += length;
    return out;
  }

  /** Each field as [number, wire type, value]: a number for varints and fixed64 doubles, bytes otherwise. */
  *fields(): Generator<[number, number, number | Uint8Array]> {
    while (!this.done()) {
      const key = this.varint();
      const field = Math.floor(key / 8);
      const wire = key & 7;
      if (wire === VARINT) yield [field, wire, this.varint()];
      else if (wire === FIXED64) yield [field, wire, Buffer.from(this.take(8)).readDoubleLE(0)];
      else if (wire === BYTES) yield [field, wire, this.take(this.varint())];
      else if (wire === FIXED32) yield [field, wire, this.take(4)];
      else throw malformed(`unsupported wire type ${wire}`);
    }
  }
}

const text = (value: number | Uint8Array) => (typeof value === 'number' ? '' : Buffer.from(value).toString('utf8'));
const bytesOf = (value: number | Uint8Array) => (typeof value === 'number' ? new Uint8Array() : value);

function littleEndian(bytes: Uint8Array, width: number, read: (view: DataView, offset: number) => number): number[] {
  if (bytes.length % width !== 0) throw malformed('a packed array has a partial element');
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: number[] = [];
  for (let offset = 0; offset < bytes.length; offset += width) out.push(read(view, offset));
  return out;
}

function decodeTensor(bytes: Uint8Array): ProtoTensor {
  let dtype = 0;
  let dense: Uint8Array = new Uint8Array();
  for (const [field, , value] of new Reader(bytes).fields()) {
    if (field === 1) dense = bytesOf(value);
    else if (field === 2) throw malformed('sparse tensors are not supported');
    else if (field === 3) dtype = Number(value);
  }
  if (dtype === DTYPE_FLOAT32)
    return { dtype: 'float32', values: littleEndian(dense, 4, (v, o) => v.getFloat32(o, true)) };
  if (dtype === DTYPE_INT64)
    return { dtype: 'int64', values: littleEndian(dense, 8, (v, o) => Number(v.getBigInt64(o, true))) };
  if (dtype === DTYPE_INT32) return { dtype: 'int64', values: littleEndian(dense, 4, (v, o) => v.getInt32(o, true)) };
  throw malformed(`unsupported tensor dtype ${dtype}`);
}

/** A map entry (key 1, value 2). */
function entry(bytes: Uint8Array): { key: string; value: number | Uint8Array | undefined } {
  let key = '';
  let value: number | Uint8Array | undefined;
  for (const [field, , raw] of new Reader(bytes).fields()) {
    if (field === 1) key = text(raw);
    else if (field === 2) value = raw;
  }
  return { key, value };
}

function decodeChunkTokens(bytes: Uint8Array): number[] {
  for (const [field, , value] of new Reader(bytes).fields()) {
    if (field !== 1) throw malformed('only encoded_text chunks are supported (no images or audio)');
    for (const [inner, , tokens] of new Reader(bytesOf(value)).fields()) {
      if (inner === 1) return littleEndian(bytesOf(tokens), 4, (v, o) => v.getInt32(o, true));
    }
    return [];
  }
  return [];
}

/** A `ProvenanceSpan`: its one arm, prompt_tokens (1) or sampled_tokens (2), each (sequence_id, offset, length). */
function decodeSpan(bytes: Uint8Array): ProvenanceSpan {
  for (const [arm, , value] of new Reader(bytes).fields()) {
    if (arm !== 1 && arm !== 2) continue;
    const span: ProvenanceSpan = { kind: arm === 1 ? 'prompt' : 'sampled', sequenceId: '', offset: 0, length: 0 };
    for (const [field, , inner] of new Reader(bytesOf(value)).fields()) {
      if (field === 1) span.sequenceId = text(inner);
      else if (field === 2) span.offset = Number(inner);
      else if (field === 3) span.length = Number(inner);
    }
    return span;
  }
  throw malformed('a provenance span has neither prompt_tokens nor sampled_tokens');
}

function decodeDatum(bytes: Uint8Array): ProtoDatum {
  // Keys are the client's: a null-prototype object keeps `__proto__` an ordinary (unknown) name.
  const datum: ProtoDatum = { tokens: [], lossFnInputs: Object.create(null) as Record<string, ProtoTensor> };
  const inputSpans: ProvenanceSpan[] = [];
  const targetSpans: ProvenanceSpan[] = [];
  for (const [field, , value] of new Reader(bytes).fields()) {
    if (field === 1) datum.tokens.push(...decodeChunkTokens(bytesOf(value)));
    else if (field === 2) {
      const { key, value: tensor } = entry(bytesOf(value));
      datum.lossFnInputs[key] = decodeTensor(tensor instanceof Uint8Array ? tensor : new Uint8Array());
    } else if (field === 3) inputSpans.push(decodeSpan(bytesOf(value)));
    else if (field === 4) targetSpans.push(decodeSpan(bytesOf(value)));
  }
  // The SDK sends both lists or neither (Datum.with_provenance).
  if (inputSpans.length > 0 || targetSpans.length > 0) {
    datum.modelInputSpans = inputSpans;
    datum.lossFnInputSpans = targetSpans;
  }
  return datum;
}

/** The `ForwardBackwardRequest` message; numeric loss config from the v2 map (numbers) or the legacy one. */
export function decodeForwardBackward(bytes: Uint8Array): ProtoForwardBackward {
  const config = Object.create(null) as Record<string, number>;
  const request: ProtoForwardBackward = {
    model_id: '',
    seq_id: 0,
    loss_fn: '',
    loss_fn_config: config,
    forward_only: false,
    data: [],
  };
  for (const [field, , value] of new Reader(bytes).fields()) {
    if (field === 1) request.model_id = text(value);
    else if (field === 2) request.seq_id = Number(value);
    else if (field === 3) request.data.push(decodeDatum(bytesOf(value)));
    else if (field === 4) request.loss_fn = text(value);
    else if (field === 5 || field === 7) {
      const { key, value: raw } = entry(bytesOf(value));
      const number = typeof raw === 'number' ? raw : raw ? configNumber(raw) : undefined;
      if (number !== undefined) request.loss_fn_config[key] = number;
    } else if (field === 6) request.forward_only = value === 1;
  }
  return request;
}

function configNumber(bytes: Uint8Array): number | undefined {
  for (const [field, , value] of new Reader(bytes).fields()) {
    if (field === 1 && typeof value === 'number') return value;
    if (field === 2) throw malformed('text loss_fn_config values are not supported');
  }
  return undefined;
}

class Writer {
  private readonly parts: Uint8Array[] = [];

  private varint(value: number): void {
    const out: number[] = [];
    let rest = value;
    while (rest >= 0x80) {
      out.push((rest % 128) | 0x80);
      rest = Math.floor(rest / 128);
    }
    out.push(rest);
    this.parts.push(Uint8Array.from(out));
  }

  uint(field: number, value: number): this {
    if (value === 0) return this;
    this.varint(field * 8 + VARINT);
    this.varint(value);
    return this;
  }

  bytes(field: number, value: Uint8Array): this {
    this.varint(field * 8 + BYTES);
    this.varint(value.length);
    this.parts.push(value);
    return this;
  }

  string(field: number, value: string): this {
    return this.bytes(field, Buffer.from(value, 'utf8'));
  }

  double(field: number, value: number): this {
    this.varint(field * 8 + FIXED64);
    const buffer = Buffer.alloc(8);
    buffer.writeDoubleLE(value);
    this.parts.push(buffer);
    return this;
  }

  finish(): Uint8Array {
    return Buffer.concat(this.parts);
  }
}

const float32s = (values: number[]) => new Uint8Array(Float32Array.from(values).buffer);
const int32s = (values: number[]) => new Uint8Array(Int32Array.from(values).buffer);

export interface SampleSequenceOut {
  stop_reason: 'stop' | 'length';
  tokens: number[];
  logprobs: number[];
}

/** `SampleResponse`: sequences (stop reason, int32 tokens, float32 logprobs) and optional prompt logprobs. */
export function encodeSampleResponse(sequences: SampleSequenceOut[], promptLogprobs: number[] | null): Uint8Array {
  const writer = new Writer();
  for (const sequence of sequences) {
    const inner = new Writer()
      .uint(1, sequence.stop_reason === 'length' ? 1 : 0)
      .bytes(2, int32s(sequence.tokens))
      .bytes(3, float32s(sequence.logprobs));
    writer.bytes(1, inner.finish());
  }
  // The SDK reads prompt logprobs as float32 with NaN where a position has none (the first).
  if (promptLogprobs) writer.bytes(2, float32s(promptLogprobs));
  return writer.finish();
}

/** `ForwardBackwardOutput`: one ArrayRecord of float32 per-datum fields (concatenated, with byte offsets) and metrics. */
export function encodeForwardBackwardOutput(
  outputs: Record<string, number[]>[],
  metrics: Record<string, number>,
): Uint8Array {
  const writer = new Writer().string(1, 'ArrayRecord');
  const record = new Writer().string(1, 'ArrayRecord');
  const names = outputs.length ? Object.keys(outputs[0]) : [];
  for (const name of names) {
    const offsets = [0];
    for (const output of outputs) offsets.push(offsets[offsets.length - 1] + output[name].length * 4);
    const tensor = new Writer()
      .bytes(1, float32s(outputs.flatMap((output) => output[name])))
      .bytes(2, new Uint8Array(BigInt64Array.from(offsets.map(BigInt)).buffer))
      .uint(3, DTYPE_FLOAT32);
    record.bytes(2, new Writer().string(1, name).bytes(2, tensor.finish()).finish());
  }
  record.uint(3, outputs.length);
  writer.bytes(2, record.finish());
  for (const [key, value] of Object.entries(metrics))
    writer.bytes(3, new Writer().string(1, key).double(2, value).finish());
  return writer.finish();
}
